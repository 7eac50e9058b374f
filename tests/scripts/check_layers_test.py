#!/usr/bin/env python3
"""Tests of scripts/check_layers.py: the tree passes, and each of the upward includes the tree
once had is caught and named when put back into a copy of it."""

import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

REPO = pathlib.Path(__file__).resolve().parents[2]
CHECK = REPO / "scripts" / "check_layers.py"


def run_check(root):
    return subprocess.run([sys.executable, str(CHECK), "--root", str(root)],
                          capture_output=True, text=True, timeout=120)


class IncludeLayers(unittest.TestCase):
    def test_tree_follows_table(self):
        result = run_check(REPO)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def copy_of_tree(self, scratch):
        root = pathlib.Path(scratch)
        for folder in ("src", "tools", "include", "docs"):
            shutil.copytree(REPO / folder, root / folder)
        return root

    def assert_caught(self, file, include, expected):
        with tempfile.TemporaryDirectory() as scratch:
            root = self.copy_of_tree(scratch)
            path = root / file
            path.write_text(f'#include "{include}"\n' + path.read_text())
            result = run_check(root)
            self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
            self.assertIn(f'{file}:1: includes "{include}": {expected}', result.stdout)

    def test_catches_graph_including_ops(self):
        self.assert_caught("src/graph/op_registry.cc", "ops/register.h",
                           "module 'graph' (layer 2) may not include 'ops' (layer 3)")

    def test_catches_kernels_including_quantize(self):
        self.assert_caught("src/kernels/kernel.cc", "quantize/calibration.h",
                           "module 'kernels' (layer 4) may not include 'quantize' (layer 7)")

    def test_catches_a_sideways_include(self):
        self.assert_caught("src/transforms/rewriter.h", "modelfile/model_file.h",
                           "module 'transforms' (layer 4) may not include 'modelfile' (layer 4)")

    def test_catches_a_folder_missing_from_the_table(self):
        with tempfile.TemporaryDirectory() as scratch:
            root = self.copy_of_tree(scratch)
            (root / "src" / "newmodule").mkdir()
            (root / "src" / "newmodule" / "x.cc").write_text("int x;\n")
            result = run_check(root)
            self.assertEqual(result.returncode, 1)
            self.assertIn("src/newmodule/x.cc: module 'newmodule' is not in the layer table",
                          result.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
