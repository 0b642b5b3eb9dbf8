#!/usr/bin/env python3
"""Writes the binary seed files of tests/fuzz/corpus/ (the text ones are
checked in as they are). Run from anywhere; rewrites the same bytes:
    python3 tests/fuzz/corpus/make_seeds.py
Protobuf and TFRecord bytes are spelled out here by hand so the seeds do
not depend on the code they test."""
import gzip
import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord(records):
    out = b""
    for r in records:
        n = struct.pack("<Q", len(r))
        out += n + struct.pack("<I", masked(n)) + r + struct.pack("<I", masked(r))
    return out


def varint(v):
    v &= (1 << 64) - 1
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def ld(field, payload):  # length-delimited field
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def vi(field, value):
    return varint(field << 3) + varint(value)


def f64(field, value):
    return varint(field << 3 | 1) + struct.pack("<Q", value)


# DataType numbering of proto/tensor.proto.
DT_FLOAT, DT_INT64 = 1, 2


def tensor(dtype, dims, content):
    return vi(1, dtype) + ld(2, ld(1, b"".join(varint(d) for d in dims))) + ld(4, content)


def floats(*v):
    return struct.pack("<%df" % len(v), *v)


def int64s(*v):
    return struct.pack("<%dq" % len(v), *v)


# tf.train.Example: features { feature { key value } }.
def example(feats):
    entries = b""
    for key, (kind, values) in feats.items():
        if kind == "float":
            feat = ld(2, ld(1, floats(*values)))
        elif kind == "bytes":
            feat = ld(1, b"".join(ld(1, v) for v in values))
        else:
            feat = ld(3, ld(1, b"".join(varint(v) for v in values)))
        entries += ld(1, ld(1, key.encode()) + ld(2, feat))
    return ld(1, entries)


def write(target, name, data):
    d = os.path.join(HERE, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- record_io_fuzzer: whole TFRecord files.
write("record_io_fuzzer", "two_records", tfrecord([b"first", b"second record"]))
write("record_io_fuzzer", "empty_record", tfrecord([b""]))
write("record_io_fuzzer", "truncated", tfrecord([b"abcdef"])[:-3])
# A length of 3 GiB whose CRC matches, and no data (regression seed).
n = struct.pack("<Q", 3 << 30)
write("record_io_fuzzer", "huge_length", n + struct.pack("<I", masked(n)) + b"abc")
# Compressed as TensorFlow's compression_type="GZIP" / "ZLIB" (Python's own
# gzip and zlib, mtime 0 so the bytes repeat), whole and cut short.
gz = gzip.compress(tfrecord([b"first", b"second record"]), mtime=0)
write("record_io_fuzzer", "gzip_two_records", gz)
write("record_io_fuzzer", "gzip_truncated", gz[: len(gz) - 9])
write("record_io_fuzzer", "zlib_two_records", zlib.compress(tfrecord([b"first", b"second record"])))

# ---- input_source_fuzzer: selector byte, then the file(s).
LIBSVM, CSV, IDX, TFRECORD, NAMED_LABEL, CLASSES = 0, 1, 2, 3, 4, 8
write("input_source_fuzzer", "libsvm", bytes([LIBSVM]) + b"1 3:0.5 7:1 qid:2 # c\n0 1:2\n\n-1.5 0:1e3\n")
write("input_source_fuzzer", "libsvm_classes", bytes([LIBSVM | CLASSES]) + b"3 1:1\nnan 2:1\n")
write("input_source_fuzzer", "csv_numbered", bytes([CSV]) + b"1,0.5,2,3\r\n0,1,1,1\n")
write("input_source_fuzzer", "csv_header", bytes([CSV | NAMED_LABEL | CLASSES]) + b"a, label,b,c\n1,2,3,4\n5,6,7,8\n")


def idx(dims, data):
    return bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + data


images = idx([2, 2, 2], bytes(range(8)))
labels = idx([2], bytes([3, 9]))
cut = len(images)
write("input_source_fuzzer", "idx", bytes([IDX, cut & 0xFF, cut >> 8]) + images + labels)
# dims whose product wraps around 64 bits to the data's size (regression seed).
wrap = idx([2, 1 << 31, 1 << 31, 1 << 31, 1 << 31, 2], b"")
write("input_source_fuzzer", "idx_overflow", bytes([IDX, len(wrap) & 0xFF, len(wrap) >> 8]) + wrap + labels)
ex1 = example({"x": ("float", [1.0, 2.0]), "ids": ("int64", [4, 5, 6]), "label": ("int64", [1])})
ex2 = example({"x": ("int64", [3, 4]), "ids": ("int64", []), "label": ("float", [0.5])})
write("input_source_fuzzer", "tfrecord", bytes([TFRECORD]) + tfrecord([ex1, ex2]))
# "x" as raw uint8 pixels (selector bit 2), the file gzip-compressed and
# GZIP configured (bit 4).
RAW_UINT8, GZIP = 4, 16
ex3 = example({"x": ("bytes", [bytes([0, 255])]), "ids": ("int64", [7]), "label": ("int64", [2])})
ex4 = example({"x": ("bytes", [bytes([9])]), "ids": ("int64", []), "label": ("int64", [0])})
write("input_source_fuzzer", "tfrecord_raw_uint8_gzip",
      bytes([TFRECORD | RAW_UINT8 | GZIP]) + gzip.compress(tfrecord([ex3, ex4]), mtime=0))

# ---- ps_request_fuzzer: selector byte (message | mode << 3), then the body.
PULL, PULL_ROWS, PUSH, PUSH_ROWS, PULL_RESULT, PUSH_RESULT, CREATE = range(7)
ASYNC, SYNC, STALE = 0, 1, 2


def request_id(worker, step, incarnation=5):
    return ld(1, vi(1, worker) + f64(2, incarnation) + vi(3, step))


def named(name, t):
    return ld(1, name.encode()) + ld(2, t)


def seed(name, which, mode, body):
    write("ps_request_fuzzer", name, bytes([which | mode << 3]) + body)


seed("pull", PULL, ASYNC, ld(1, b"w") + ld(1, b"b") + vi(2, 1) + vi(3, 4))
seed("pull_sync_waits", PULL, SYNC, ld(1, b"w") + vi(2, 0) + vi(3, 9))
seed("pull_rows", PULL_ROWS, STALE,
     ld(1, ld(1, b"emb") + ld(2, tensor(DT_INT64, [3], int64s(0, 15, 3)))) +
     ld(1, ld(1, b"hash") + ld(2, tensor(DT_INT64, [2], int64s(-7, 1 << 40)))) + vi(2, 1))
seed("push", PUSH, ASYNC,
     request_id(0, 1) + ld(2, named("w", tensor(DT_FLOAT, [4, 3], floats(*range(12))))) +
     ld(2, named("b", tensor(DT_FLOAT, [3], floats(1, 2, 3)))))
seed("push_sync", PUSH, SYNC, request_id(1, 0) + ld(2, named("b", tensor(DT_FLOAT, [3], floats(1, 2, 3)))))
seed("push_huge_worker", PUSH, STALE, request_id(0x7FFFFFFF, (1 << 63) - 1))
seed("push_rows", PUSH_ROWS, ASYNC,
     request_id(0, 2) + ld(2, ld(1, b"emb") + ld(2, tensor(DT_INT64, [2], int64s(1, 2))) +
                          ld(3, tensor(DT_FLOAT, [2, 4], floats(*range(8))))) +
     ld(2, ld(1, b"hash") + ld(2, tensor(DT_INT64, [1], int64s(99))) +
        ld(3, tensor(DT_FLOAT, [1, 2], floats(1, 2)))))
seed("pull_result", PULL_RESULT, ASYNC,
     ld(1, named("w", tensor(DT_FLOAT, [2], floats(1, 2)))) + vi(2, 7) + f64(3, 9))
seed("push_result", PUSH_RESULT, ASYNC, vi(1, 3) + vi(2, 1))
variable = (ld(1, b"v") + vi(3, DT_FLOAT) + ld(4, ld(1, varint(3) + varint(2))))
table = (ld(1, b"t") + vi(2, 1) + vi(3, DT_FLOAT) + ld(4, ld(1, varint(8) + varint(2))) + vi(5, 2) + vi(6, 6))
sgd = ld(2, ld(1, b"\x0d" + floats(0.1)))  # optimizer { sgd { learning_rate: 0.1 } }
seed("create", CREATE, ASYNC, ld(1, variable) + ld(1, table) + sgd + vi(4, 2))
# float32 [2^62, 1]: 2^64 bytes, which wraps to 0 (regression seed).
wrapped = (ld(1, b"big") + vi(3, DT_FLOAT) + ld(4, ld(1, varint(1 << 62) + varint(1))))
seed("create_overflow", CREATE, ASYNC, ld(1, wrapped) + sgd + vi(4, 1))
# num_workers 2^31-4 sized per-worker state at 16 GiB (regression seed; the
# libFuzzer run's crash file, written here by hand).
seed("create_many_workers", CREATE, ASYNC, ld(1, variable) + sgd + vi(4, 0x7FFFFFFC))

# ---- tensor_wire_fuzzer: byte 0 says where to cut the slices, then
# fields: 1 = NamedTensor, others = bare TensorProto.
def tw(name, cuts, body):
    write("tensor_wire_fuzzer", name, bytes([cuts]) + body)


tw("float_2x3", 0, ld(1, named("dense/kernel", tensor(DT_FLOAT, [2, 3], floats(*range(6))))))
unpacked = vi(1, DT_INT64) + ld(2, vi(1, 3)) + ld(4, int64s(1, 5, 7))  # dims not packed
tw("int64_ids", 0x1B, ld(1, named("ids", unpacked)))
tw("scalar_and_bare", 0x25, ld(1, named("s", tensor(DT_FLOAT, [], floats(1.5)))) +
   ld(2, tensor(DT_FLOAT, [0, 4], b"")))
# int64 [2^61]: 2^64 bytes, which wrapped to 0 (regression seed).
tw("huge_dim", 0, ld(1, named("h", tensor(DT_INT64, [1 << 61], b""))))
content_first = ld(4, b"\0" * 8) + ld(2, ld(1, varint(2))) + vi(1, DT_FLOAT)
tw("content_first", 0x3F, ld(1, ld(2, content_first) + ld(1, b"x")))

# ---- chief_service_fuzzer: records [op][length][body]; op 0 Register,
# 1 Heartbeat, 2 ReportFailure, 3 JobStatus, 4 certificate name, 5 token file.
def rec(op, body):
    assert len(body) < 256
    return bytes([op, len(body)]) + body


def task_id(job, index):
    return ld(1, job.encode()) + vi(2, index)


def register(job, index, incarnation, address=b"127.0.0.1:4"):
    return rec(0, ld(1, ld(1, task_id(job, index)) + ld(2, address) + f64(3, incarnation)))


def chief_seed(name, *records):
    write("chief_service_fuzzer", name, b"".join(records))


beat = rec(1, ld(1, task_id("worker", 0)) + f64(2, 0x5EED) + vi(3, 12))
# A registered worker heartbeats, reports a PS with a forged log line in its
# text (and once with a wrong incarnation), and JobStatus is asked.
chief_seed("register_beat_report", register("worker", 0, 0x5EED), beat,
           rec(2, ld(1, task_id("worker", 0)) + ld(2, task_id("ps", 1)) +
               ld(3, b"ps:1 gone\nE1124 forged <b>line</b>\r\x1b[2J") + vi(4, 40) + f64(5, 0x5EED)),
           rec(2, ld(1, task_id("worker", 0)) + ld(3, b"x") + f64(5, 0x5EEE)),
           rec(3, b""))
# A restart (new incarnation), a heartbeat of the old one, a task not in the spec.
chief_seed("restart_and_strangers", register("ps", 1, 9), register("ps", 1, 10),
           rec(1, ld(1, task_id("ps", 1)) + f64(2, 9)), register("worker", 7, 3), register("evil\n", -1, 1),
           rec(3, b""))
chief_seed("certificate_names", rec(4, b"worker-3"), rec(4, b"chief"), rec(4, b"chief-0"), rec(4, b"ps-12"),
           rec(4, b"client"), rec(4, b"worker-01"), rec(4, b"ps-99999999999"), rec(4, b"ps--1"))
digest = "ab" * 32
chief_seed("token_files",
           rec(5, b"0123456789abcdef0123456789abcdef\n"),
           rec(5, ("0123456789abcdef0123\nworker sha256:" + digest + "\nchief sha256:" + digest + "\n").encode()),
           rec(5, ("0123456789abcdef0123\n# c\nadmin sha256:" + digest + "\n").encode()),
           rec(5, b"short\n"))

# ---- tcp_frame_fuzzer: byte 0 = 0 (requests, the PS's side) or 1 (answers),
# then the TCP data plane's byte stream (common/transport/tcp_frame.h).
def tcp_frame(kind, word, call_id, pads, message, payload_runs):
    """payload_runs: list of (pad_bytes_before, bytes); a pad entry each."""
    table = b""
    body_after = b""
    offset = 32 + 8 * len(pads) + len(message)
    for pad, run in payload_runs:
        if pad is not None:
            table += struct.pack("<II", offset, pad)
            body_after += b"\0" * pad
            offset += pad
        body_after += run
        offset += len(run)
    body = (struct.pack("<BBHIQiIq", 1, kind, len(pads), word, call_id, -1, 0, 0) + table + message +
            body_after)
    return struct.pack("<Q", len(body)) + body


push_body = request_id(0, 1) + ld(2, named("w", tensor(DT_FLOAT, [4, 3], floats(*range(12)))))
pull_body = ld(1, b"w") + vi(2, 1) + vi(3, 4)
write("tcp_frame_fuzzer", "requests", b"\0" +
      tcp_frame(3, 30000, 1, [], b"", [(None, push_body)]) +
      tcp_frame(1, 5, 2, [], b"", [(None, pull_body)]))
# A push whose tensor content (4096 floats) is padded to start aligned.
big = floats(*([0.5] * 4096))
head = request_id(0, 2) + ld(2, ld(1, b"big") + ld(2, vi(1, DT_FLOAT) + ld(2, ld(1, varint(4096))) +
                                            varint(4 << 3 | 2) + varint(len(big))))
off = 32 + 8 + len(head)
write("tcp_frame_fuzzer", "aligned_push", b"\0" +
      tcp_frame(3, 1000, 3, [0], b"", [(None, head), ((64 - off % 64) % 64, big)]))
# An oversized frame (over the harness's 1 MiB): skipped, the stream ends in it.
oversized = struct.pack("<Q", (1 << 20) + 32) + struct.pack("<BBHIQiIq", 1, 1, 0, 5, 77, -1, 0, 0) + b"x" * 64
write("tcp_frame_fuzzer", "oversized", b"\0" + oversized)
write("tcp_frame_fuzzer", "answers", b"\1" +
      tcp_frame(0x80, 0, 1, [], b"", [(None, ld(1, named("w", tensor(DT_FLOAT, [2], floats(1, 2)))) + vi(2, 7))]) +
      tcp_frame(0x80 | 9, 11, 2, [], b"generation!", []))
write("tcp_frame_fuzzer", "short_header", b"\0" + struct.pack("<Q", 5) + b"\1\3\0\0\0")

# checkpoint_reader_fuzzer: byte 0 bit 0 clear, a SnapshotIndex (the harness
# puts floats 1..4 as the old-format chunk s/<1>/0/value/000000 and floats
# 1..16 as the data file's first 64 bytes); bit 0 set, a manifest.
def fixed32(field, value):
    return varint(field << 3 | 5) + struct.pack("<I", value)


def dims(*d):
    return ld(1, b"".join(varint(x) for x in d))


def var_def(name, kind=0, shape=(4,)):
    return ld(1, name) + (vi(2, kind) if kind else b"") + vi(3, DT_FLOAT) + ld(4, dims(*shape))


def snap_tensor(key, dtype, shape, nbytes, crc, chunks=0, offset=0):
    out = ld(1, key) + vi(2, dtype) + ld(3, dims(*shape)) + vi(4, nbytes)
    if chunks:
        out += vi(5, chunks)
    out += fixed32(6, crc)
    if offset:
        out += vi(7, offset)
    return out


CHUNK = floats(1, 2, 3, 4)
DATA = floats(*range(1, 17))
DATA_FILE = b"snapshot-00000000000000000001-0000000000000000.data"
OLD_KEY = b"s/00000000000000000001/0/value"


def index_seed(name, variables, data_file=b"", data_bytes=0):
    body = vi(1, 1) + b"".join(ld(5, v) for v in variables)
    if data_file:
        body += ld(8, data_file) + vi(9, data_bytes)
    write("checkpoint_reader_fuzzer", name, b"\0" + body)


index_seed("old_format", [var_def(b"w") + ld(3, snap_tensor(OLD_KEY, DT_FLOAT, [4], 16, crc32c(CHUNK), chunks=1))])
# 1 TiB named, 16 bytes held.
index_seed("old_format_huge",
           [var_def(b"w") + ld(3, snap_tensor(OLD_KEY, DT_FLOAT, [1 << 38], 1 << 40, 0, chunks=1 << 17))])
index_seed("data_file", [var_def(b"w") + ld(3, snap_tensor(b"0/value", DT_FLOAT, [4], 16, crc32c(DATA[:16]))) +
                         ld(4, snap_tensor(b"0/slot0", DT_FLOAT, [4], 16, crc32c(DATA[16:32]), offset=16))],
           DATA_FILE, 64)
index_seed("hash_table", [var_def(b"h", kind=2, shape=(0, 2)) +
                          ld(3, snap_tensor(b"0/value", DT_FLOAT, [2, 2], 16, crc32c(DATA[:16]))) +
                          ld(5, snap_tensor(b"0/ids", DT_INT64, [2], 16, crc32c(DATA[16:32]), offset=16))],
           DATA_FILE, 64)
# A 1 TiB tensor in a sparse file of that size.
index_seed("sparse_huge", [var_def(b"w") + ld(3, snap_tensor(b"0/value", DT_FLOAT, [1 << 38], 1 << 40, 0, offset=64))],
           DATA_FILE, (1 << 40) + 64)
index_seed("wrong_dtype", [var_def(b"w") + ld(3, snap_tensor(b"0/value", 3, [4], 16, crc32c(DATA[:16])))],
           DATA_FILE, 64)
index_seed("data_file_elsewhere", [var_def(b"w") + ld(3, snap_tensor(b"0/value", DT_FLOAT, [4], 16, 0))],
           b"../ps-1/" + DATA_FILE, 64)


def manifest_seed(name, paths):
    body = vi(1, 1) + b"".join(ld(3, vi(1, i) + ld(2, p)) for i, p in enumerate(paths))
    write("checkpoint_reader_fuzzer", name, b"\1" + body)


manifest_seed("manifest", [b"ps-0", b"worker-1"])
manifest_seed("manifest_dotdot", [b"ps-0", b"../../x"])
manifest_seed("manifest_absolute", [b"/etc"])
