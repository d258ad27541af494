"""Writes the data sets of .ci/convergence.sh in LIBSVM form to a folder:
NAME.tr and NAME.te for mnist01234 (MNIST raw pixels, label 1 for digits
0-4), breast_cancer and digits01234 (scikit-learn's, split 70/30, seed 0)."""
import gzip
import os
import struct
import sys

import numpy as np
from sklearn.datasets import load_breast_cancer, load_digits
from sklearn.model_selection import train_test_split


def write(path, x, y):
    with open(path, "w") as f:
        for row, label in zip(x, y):
            feats = " ".join(f"{j + 1}:{v:g}" for j, v in enumerate(row) if v != 0)
            f.write(f"{'+1' if label else '-1'} {feats}\n")


def idx(path):
    with gzip.open(path, "rb") as f:
        magic = struct.unpack(">I", f.read(4))[0]
        dims = struct.unpack(">" + "I" * (magic & 0xFF), f.read(4 * (magic & 0xFF)))
        return np.frombuffer(f.read(), dtype=np.uint8).reshape(dims)


def main(out, mnist):
    for name, (x, y) in {"breast_cancer": load_breast_cancer(return_X_y=True),
                         "digits01234": load_digits(return_X_y=True)}.items():
        if name.startswith("digits"):
            y = y < 5
        a, b, ya, yb = train_test_split(x, y, test_size=0.3, random_state=0, stratify=y)
        write(f"{out}/{name}.tr", a, ya)
        write(f"{out}/{name}.te", b, yb)
    if "mnist01234" not in os.environ.get("CONV_SETS", "mnist01234"):
        return
    xtr = idx(f"{mnist}/train-images-idx3-ubyte.gz").reshape(60000, -1)
    ytr = idx(f"{mnist}/train-labels-idx1-ubyte.gz")
    xte = idx(f"{mnist}/t10k-images-idx3-ubyte.gz").reshape(10000, -1)
    yte = idx(f"{mnist}/t10k-labels-idx1-ubyte.gz")
    write(f"{out}/mnist01234.tr", xtr, ytr < 5)
    write(f"{out}/mnist01234.te", xte, yte < 5)


main(sys.argv[1], sys.argv[2])
