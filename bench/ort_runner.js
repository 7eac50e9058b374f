// Runs an ONNX model with ONNX Runtime (npm onnxruntime-node@1.30.0) on a .npy input, writes
// the output as .npy and prints latency as JSON. The peer for bench/inference_vs_ort.py.
//
//   node bench/ort_runner.js MODEL.onnx INPUT.npy OUTPUT.npy [--runs N] [--threads T] [--batch B]
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require(path.join(__dirname, '..', 'node_modules', 'onnxruntime-node'));

function readNpy(file) {
  const buf = fs.readFileSync(file);
  const major = buf[6];
  const headerLen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const start = major === 1 ? 10 : 12;
  const header = buf.toString('latin1', start, start + headerLen);
  if (!header.includes("'<f4'")) throw new Error(`${file}: only float32 .npy is supported`);
  const shape = header.match(/\(([^)]*)\)/)[1].split(',').filter((s) => s.trim()).map(Number);
  const offset = start + headerLen;
  const data = new Float32Array(buf.buffer.slice(buf.byteOffset + offset, buf.byteOffset + buf.length));
  return { data, shape };
}

function writeNpy(file, data, shape) {
  let header = `{'descr': '<f4', 'fortran_order': False, 'shape': (${shape.join(', ')}${shape.length === 1 ? ',' : ''}), }`;
  const total = 10 + header.length + 1;
  header += ' '.repeat((64 - (total % 64)) % 64) + '\n';
  const head = Buffer.alloc(10);
  head.write('\x93NUMPY', 0, 'latin1');
  head[6] = 1; head[7] = 0;
  head.writeUInt16LE(header.length, 8);
  fs.writeFileSync(file, Buffer.concat([head, Buffer.from(header, 'latin1'),
                                        Buffer.from(data.buffer, data.byteOffset, data.byteLength)]));
}

async function main() {
  const args = process.argv.slice(2);
  const option = (name, fallback) => {
    const i = args.indexOf(name);
    return i >= 0 ? Number(args[i + 1]) : fallback;
  };
  const [modelPath, inputPath, outputPath] = args;
  const runs = option('--runs', 100);
  const threads = option('--threads', 2);
  const batch = option('--batch', 0);
  const session = await ort.InferenceSession.create(modelPath, {
    intraOpNumThreads: threads, interOpNumThreads: 1, graphOptimizationLevel: 'all',
    executionMode: 'sequential',
  });
  let { data, shape } = readNpy(inputPath);
  if (batch > 0 && batch !== shape[0]) {
    const per = data.length / shape[0];
    const grown = new Float32Array(per * batch);
    for (let b = 0; b < batch; ++b) grown.set(data.subarray((b % shape[0]) * per, (b % shape[0] + 1) * per), b * per);
    data = grown;
    shape = [batch, ...shape.slice(1)];
  }
  const feeds = { [session.inputNames[0]]: new ort.Tensor('float32', data, shape) };
  let out = await session.run(feeds);
  for (let i = 0; i < 10; ++i) out = await session.run(feeds);
  const times = [];
  for (let i = 0; i < runs; ++i) {
    const t0 = process.hrtime.bigint();
    out = await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  const result = out[session.outputNames[0]];
  if (outputPath) writeNpy(outputPath, result.data, result.dims);
  times.sort((a, b) => a - b);
  const pick = (q) => times[Math.min(times.length - 1, Math.round(q * (times.length - 1)))];
  console.log(JSON.stringify({
    latency_ms_min: times[0], latency_ms_median: pick(0.5), latency_ms_p90: pick(0.9),
    throughput_per_sec: shape[0] * 1000 / pick(0.5),
    peak_rss_mb: process.resourceUsage().maxRSS / 1024,
  }));
}

main().catch((e) => { console.error(`ort_runner: ${e.message}`); process.exit(1); });
