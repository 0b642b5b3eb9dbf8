"""Writes PNG and JPEG images with TensorFlow itself (/opt/psrt/venv-tf), for
the decode: ENCODED_IMAGE tests.

  write_images_with_tensorflow.py DIR

writes into DIR:
  images.tfrecord
      8 tf.train.Example, each with
        "png", "jpeg": a 28x28x1 gray image, tf.io.encode_png and
            tf.io.encode_jpeg(quality=100)
        "rgb_png", "rgb_jpeg": an 8x6x3 RGB image, the same encoders
        "<name>_tf": TensorFlow's own decode (tf.io.decode_png /
            tf.io.decode_jpeg, dct_method "INTEGER_ACCURATE") of "<name>",
            its raw uint8 bytes
        "label": i % 3
  bad.tfrecord
      2 tf.train.Example, "png" and "label" as above: record 0 a good PNG,
      record 1 the PNG cut to half its bytes
  bad_crc.tfrecord
      1 tf.train.Example, "png" and "label": a PNG whose IDAT bytes are
      overwritten (its CRC no longer matches)
  bad_jpeg.tfrecord
      2 tf.train.Example, "jpeg" and "label": record 0 a good JPEG,
      record 1 a JPEG cut to half its bytes
"""
import sys

import numpy as np
import tensorflow as tf


def image(seed, shape):
    # Smooth gradients plus noise: as photographs are, and every byte value.
    rng = np.random.RandomState(seed)
    h, w, c = shape
    y, x = np.mgrid[0:h, 0:w]
    base = (x * 255 // max(1, w - 1) + y * 7)[:, :, None] + np.arange(c)[None, None, :] * 40
    return ((base + rng.randint(0, 60, size=shape)) % 256).astype(np.uint8)


def feature_bytes(b):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[b]))


def label(i):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 3]))


def encoded(i):
    gray = image(i, (28, 28, 1))
    rgb = image(100 + i, (8, 6, 3))
    out = {
        "png": tf.io.encode_png(gray).numpy(),
        "jpeg": tf.io.encode_jpeg(gray, quality=100).numpy(),
        "rgb_png": tf.io.encode_png(rgb).numpy(),
        "rgb_jpeg": tf.io.encode_jpeg(rgb, quality=100).numpy(),
    }
    decoded = {}
    for name, data in out.items():
        # INTEGER_ACCURATE: libjpeg's ISLOW DCT, as ours. TensorFlow's
        # default (INTEGER_FAST) is off by up to 56 from the encoded pixels
        # at quality 100 on these.
        d = (tf.io.decode_png(data) if name.endswith("png") else
             tf.io.decode_jpeg(data, dct_method="INTEGER_ACCURATE"))
        decoded[name + "_tf"] = d.numpy().tobytes()
    out.update(decoded)
    return out


def write(path, examples):
    with tf.io.TFRecordWriter(path) as w:
        for i, feats in enumerate(examples):
            f = {k: feature_bytes(v) for k, v in feats.items()}
            f["label"] = label(i)
            w.write(tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString())


if __name__ == "__main__":
    out = sys.argv[1]
    write(out + "/images.tfrecord", [encoded(i) for i in range(8)])
    png = encoded(0)["png"]
    idat = png.index(b"IDAT") + 8
    broken = png[:idat] + bytes(20) + png[idat + 20:]
    write(out + "/bad.tfrecord", [{"png": png}, {"png": png[: len(png) // 2]}])
    write(out + "/bad_crc.tfrecord", [{"png": broken}])
    jpeg = encoded(0)["jpeg"]
    write(out + "/bad_jpeg.tfrecord", [{"jpeg": jpeg}, {"jpeg": jpeg[: len(jpeg) // 2]}])
