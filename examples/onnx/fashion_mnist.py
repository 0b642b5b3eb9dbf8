"""Fashion-MNIST's IDX files and the fixed batch the reference gradients
of make_models.py and make_keras_models.py are taken on."""
import gzip

import numpy as np

BATCH = 32


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)
