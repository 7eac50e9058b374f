"""A PyTorch module built from a slimflow model spec (models/*.yaml), for the training peers.

It builds the layers the zoo's specs use with the semantics of src/models/spec.cc: conv2d and
depthwise_conv2d (kernel, strides, padding same|valid, activation none|relu|relu6, use_bias),
batch_norm (epsilon 1e-3, momentum 0.99 as a moving average), relu, relu6, max_pool (size,
strides defaulting to size, valid padding), global_avg_pool, flatten, dense, dropout, add and
channel concat; a layer reads the one before it unless it names its `inputs`. PyTorch keeps
images NCHW, so a flatten orders the features differently from ours: the same network with its
weights permuted, the same work.
"""
import math

import torch
import torch.nn.functional as F
import yaml
from torch import nn



def relu6(x):
    # F.relu6's backward (hardtanh's) has no bf16 kernel on the CPU in PyTorch 1.13; clamp has.
    return torch.clamp(x, 0.0, 6.0)


ACTIVATIONS = {"none": lambda x: x, "relu": F.relu, "relu6": relu6}


def same_pads(size, kernel, stride):
    """TensorFlow's SAME padding of one axis: (before, after)."""
    out = math.ceil(size / stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


class SpecConv(nn.Module):
    def __init__(self, layer, channels, size, depthwise):
        super().__init__()
        kernel, stride = int(layer["kernel"]), int(layer.get("strides", 1))
        filters = channels if depthwise else int(layer["filters"])
        self.conv = nn.Conv2d(channels, filters, kernel, stride, groups=channels if depthwise else 1,
                              bias=bool(layer.get("use_bias", True)))
        self.activation = ACTIVATIONS[layer.get("activation", "none")]
        self.pads = None
        height, width = size
        if layer.get("padding", "valid").lower() == "same":
            top, bottom = same_pads(height, kernel, stride)
            left, right = same_pads(width, kernel, stride)
            self.pads = (left, right, top, bottom)
            height, width = math.ceil(height / stride), math.ceil(width / stride)
        else:
            height, width = (height - kernel) // stride + 1, (width - kernel) // stride + 1
        self.out = (filters, (height, width))

    def forward(self, x):
        if self.pads and any(self.pads):
            x = F.pad(x, self.pads)
        return self.activation(self.conv(x))


# Keys a layer may carry only at these values here (PyTorch peers of other values are not built).
FIXED = {"dilation": 1, "groups": 1, "multiplier": 1, "axis": -1, "binary": False}


def check_supported(layer):
    for key, value in FIXED.items():
        if key in layer and layer[key] != value and not (key == "axis" and layer[key] == 3):
            raise SystemExit(f"spec layer '{layer['name']}': {key} {layer[key]} has no PyTorch peer here")
    padding = layer.get("padding", "valid")
    if not isinstance(padding, str) or padding.lower() not in ("same", "valid"):
        raise SystemExit(f"spec layer '{layer['name']}': padding {padding} has no PyTorch peer here")


class SpecModel(nn.Module):
    def __init__(self, spec):
        super().__init__()
        height, width, channels = spec["input"]
        shapes = {None: ("image", channels, (height, width))}
        self.mods = nn.ModuleDict()
        self.plan = []  # (name, type, input names)
        previous = None
        for layer in spec["layers"]:
            name, kind = layer["name"], layer["type"]
            check_supported(layer)
            inputs = layer.get("inputs", [previous])
            form, c, size = shapes[inputs[0]]
            key = name.replace("/", "_").replace(".", "_")
            if kind in ("conv2d", "depthwise_conv2d"):
                module = SpecConv(layer, c, size, kind == "depthwise_conv2d")
                self.mods[key] = module
                shapes[name] = ("image",) + module.out
            elif kind == "batch_norm":
                bn = nn.BatchNorm2d if form == "image" else nn.BatchNorm1d
                self.mods[key] = bn(c, eps=float(layer.get("epsilon", 1e-3)),
                                    momentum=1.0 - float(layer.get("momentum", 0.99)))
                shapes[name] = (form, c, size)
            elif kind == "max_pool":
                if layer.get("padding", "valid").lower() != "valid":
                    raise SystemExit(f"spec layer '{name}': a SAME max_pool has no PyTorch peer here")
                k = int(layer.get("size", 2))
                s = int(layer.get("strides", k))
                self.mods[key] = nn.MaxPool2d(k, s)
                shapes[name] = ("image", c, tuple((d - k) // s + 1 for d in size))
            elif kind == "global_avg_pool":
                shapes[name] = ("features", c, None)
            elif kind == "flatten":
                shapes[name] = ("features", c * size[0] * size[1] if form == "image" else c, None)
            elif kind == "dense":
                self.mods[key] = nn.Linear(c, int(layer["units"]), bias=bool(layer.get("use_bias", True)))
                shapes[name] = ("features", int(layer["units"]), None)
            elif kind == "dropout":
                self.mods[key] = nn.Dropout(float(layer.get("rate", 0.5)))
                shapes[name] = (form, c, size)
            elif kind in ("relu", "relu6", "add"):
                shapes[name] = (form, c, size)
            elif kind == "concat":
                shapes[name] = (form, sum(shapes[i][1] for i in inputs), size)
            else:
                raise SystemExit(f"spec layer '{name}': type {kind} has no PyTorch peer here")
            self.plan.append((name, kind, key, inputs, layer.get("activation", "none")))
            previous = name

    def forward(self, x):
        values = {None: x}
        for name, kind, key, inputs, activation in self.plan:
            a = values[inputs[0]]
            if kind in ("conv2d", "depthwise_conv2d", "batch_norm", "max_pool", "dropout"):
                y = self.mods[key](a)
            elif kind == "dense":
                y = ACTIVATIONS[activation](self.mods[key](a))
            elif kind == "global_avg_pool":
                y = a.mean((2, 3))
            elif kind == "flatten":
                y = torch.flatten(a, 1)
            elif kind == "relu":
                y = F.relu(a)
            elif kind == "relu6":
                y = relu6(a)
            elif kind == "add":
                y = a
                for other in inputs[1:]:
                    y = y + values[other]
            else:  # concat, over channels
                y = torch.cat([values[i] for i in inputs], 1)
            values[name] = y
        return values[self.plan[-1][0]]


def load_spec(path):
    with open(path) as f:
        return yaml.safe_load(f)


def optimizer_for(spec, parameters, lr):
    """The spec's optimizer (train.optimizer: adam, sgd or momentum) at learning rate lr."""
    train = spec.get("train", {})
    kind = train.get("optimizer", "adam")
    if kind == "adam":
        return torch.optim.Adam(parameters, lr=lr)
    if kind == "momentum":
        return torch.optim.SGD(parameters, lr=lr, momentum=float(train.get("momentum", 0.9)))
    return torch.optim.SGD(parameters, lr=lr)
