"""Exports the PyTorch 1.13 models of tests/onnx_dynamic_shapes_test.cc into a folder.

  /usr/bin/python3 tests/scripts/export_dynamic_models.py OUT_DIR [--encoder LAYERSxWIDTH]

dynamic_cnn.onnx: a conv net whose batch, height and width are symbolic; it flattens with the
batch read from the input (Shape -> Gather -> Concat -> Reshape) and upsamples to the input's
own size (Shape -> Slice -> Concat -> Resize), so its shape subgraphs depend on the input.

encoder.onnx: a small transformer encoder (2 layers, width 64 unless --encoder says otherwise,
4 heads, feed-forward twice the width, GELU, batch-first), the
ONNX the exporter writes for nn.TransformerEncoder: batched MatMul, Softmax, the decomposed
LayerNormalization (ReduceMean/Sub/Pow/Sqrt/Div) and Erf-based GELU; batch and sequence length
symbolic.

audio.onnx: a 1-D conv followed by a bidirectional GRU over time (batch and time symbolic).

video.onnx: Conv3d -> ReLU -> ConvTranspose3d (stride (1, 2, 2)) over [batch, 2, depth, height,
width], all four symbolic.
"""
import sys

import torch
import torch.nn.functional as F


class DynamicCnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        y = F.relu(self.conv1(x))
        z = F.relu(self.conv2(y))
        up = F.interpolate(z, size=(x.shape[2], x.shape[3]), mode="nearest")
        mixed = y + up
        pooled = mixed.mean(dim=(2, 3))
        flat = pooled.reshape(x.shape[0], -1)
        return self.head(flat), mixed


class Encoder(torch.nn.Module):
    def __init__(self, layers, width):
        super().__init__()
        self.embed = torch.nn.Linear(16, width)
        layer = torch.nn.TransformerEncoderLayer(width, 4, dim_feedforward=2 * width, dropout=0.0,
                                                 activation="gelu", batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, layers)
        self.head = torch.nn.Linear(width, 10)

    def forward(self, x):
        return self.head(self.encoder(self.embed(x)).mean(dim=1))


class Audio(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(8, 16, 5, padding=2)
        self.gru = torch.nn.GRU(16, 32, batch_first=True, bidirectional=True)
        self.head = torch.nn.Linear(64, 5)

    def forward(self, x):
        y, _ = self.gru(F.relu(self.conv(x)).transpose(1, 2))
        return self.head(y[:, -1])


class Video(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv3d(2, 4, 3, padding=1)
        self.up = torch.nn.ConvTranspose3d(4, 3, (3, 2, 2), stride=(1, 2, 2))

    def forward(self, x):
        return self.up(F.relu(self.conv(x)))


def main():
    out = sys.argv[1]
    layers, width = 2, 64
    if len(sys.argv) == 4 and sys.argv[2] == "--encoder":
        layers, width = (int(v) for v in sys.argv[3].split("x"))
    torch.manual_seed(0)
    torch.onnx.export(Encoder(layers, width).eval(), torch.randn(2, 12, 16), f"{out}/encoder.onnx",
                      opset_version=14, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch", 1: "sequence"}})
    torch.onnx.export(Audio().eval(), torch.randn(2, 8, 20), f"{out}/audio.onnx",
                      opset_version=14, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch", 2: "time"}})
    torch.onnx.export(Video().eval(), torch.randn(1, 2, 5, 6, 7), f"{out}/video.onnx",
                      opset_version=13, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch", 2: "depth", 3: "height", 4: "width"}})
    model = DynamicCnn().eval()
    x = torch.randn(2, 3, 12, 10)
    torch.onnx.export(
        model, x, f"{out}/dynamic_cnn.onnx", opset_version=13,
        input_names=["x"], output_names=["logits", "features"],
        dynamic_axes={"x": {0: "batch", 2: "height", 3: "width"},
                      "logits": {0: "batch"}, "features": {0: "batch", 2: "height", 3: "width"}})


if __name__ == "__main__":
    main()
