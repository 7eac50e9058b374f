#!/usr/bin/env python3
"""Exports the interop models to ONNX with Debian's PyTorch 1.13 (random weights, fixed seed).

    /usr/bin/python3 bench/export_onnx_models.py [--out runs/onnx]

Writes <name>.onnx and <name>-input.npy for resnet18, mobilenet_v2, squeezenet1_1 (224x224) and
the Deep-MNIST CNN (28x28, batch dimension dynamic).
"""
import argparse
import os

import numpy as np
import torch
import torchvision


class DeepMnist(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = torch.nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = torch.nn.Linear(3136, 1024)
        self.fc2 = torch.nn.Linear(1024, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc2(x)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/onnx")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    models = {
        "resnet18": (torchvision.models.resnet18(), (1, 3, 224, 224)),
        "mobilenet_v2": (torchvision.models.mobilenet_v2(), (1, 3, 224, 224)),
        "squeezenet1_1": (torchvision.models.squeezenet1_1(), (1, 3, 224, 224)),
        "deep-mnist": (DeepMnist(), (1, 1, 28, 28)),
    }
    rng = np.random.default_rng(0)
    for name, (model, shape) in models.items():
        model.eval()
        path = os.path.join(args.out, f"{name}.onnx")
        x = rng.standard_normal(shape).astype(np.float32)
        np.save(os.path.join(args.out, f"{name}-input.npy"), x)
        torch.onnx.export(model, torch.from_numpy(x), path, opset_version=13,
                          input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
        print(path)


if __name__ == "__main__":
    main()
