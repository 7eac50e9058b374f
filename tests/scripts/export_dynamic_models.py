"""Exports the PyTorch 1.13 models of tests/onnx_dynamic_shapes_test.cc into a folder.

  /usr/bin/python3 tests/scripts/export_dynamic_models.py OUT_DIR

dynamic_cnn.onnx: a conv net whose batch, height and width are symbolic; it flattens with the
batch read from the input (Shape -> Gather -> Concat -> Reshape) and upsamples to the input's
own size (Shape -> Slice -> Concat -> Resize), so its shape subgraphs depend on the input.
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


def main():
    out = sys.argv[1]
    torch.manual_seed(0)
    model = DynamicCnn().eval()
    x = torch.randn(2, 3, 12, 10)
    torch.onnx.export(
        model, x, f"{out}/dynamic_cnn.onnx", opset_version=13,
        input_names=["x"], output_names=["logits", "features"],
        dynamic_axes={"x": {0: "batch", 2: "height", 3: "width"},
                      "logits": {0: "batch"}, "features": {0: "batch", 2: "height", 3: "width"}})


if __name__ == "__main__":
    main()
