#!/usr/bin/env python3
"""CIFAR-10's python version for the data tests (tests/data/cifar_test.cpp), written as numpy and
pickle write it, and read back by torchvision's own CIFAR10 loader.

  cifar_python.py write DIR PER_FILE TEST SEED PROTOCOL list|numpy-labels [OUT]
      DIR/cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta}: dicts of 'data'
      (uint8 [N, 3072]), 'labels' (a list of ints, or an int64 numpy array), 'batch_label',
      'filenames', pickled at PROTOCOL with str keys (what Python 3 writes; the real files were
      written by Python 2, whose str keys read back as bytes). With OUT, then `torchvision DIR OUT`.
  cifar_python.py tar DIR ARCHIVE
      ARCHIVE (.tar.gz) of DIR/cifar-10-batches-py, members in the real archive's shuffled order.
  cifar_python.py torchvision DIR OUT
      torchvision.datasets.CIFAR10(DIR) train then test (md5 check bypassed: the data is not the
      real one): OUT gets every image as CHW uint8 bytes, OUT.labels one label per line.
"""
import os, pickle, sys, tarfile

import numpy as np

NAMES = ["data_batch_%d" % i for i in range(1, 6)] + ["test_batch"]


def write(d, per_file, test, seed, protocol, numpy_labels):
    rng = np.random.default_rng(seed)
    out = os.path.join(d, "cifar-10-batches-py")
    os.makedirs(out, exist_ok=True)
    for name in NAMES:
        n = test if name == "test_batch" else per_file
        data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        labels = rng.integers(0, 10, size=n)
        batch = {"batch_label": "batch " + name, "labels": labels.astype(np.int64) if numpy_labels else
                 [int(v) for v in labels], "data": data, "filenames": ["img_%d.png" % i for i in range(n)]}
        with open(os.path.join(out, name), "wb") as f:
            pickle.dump(batch, f, protocol=protocol)
    with open(os.path.join(out, "batches.meta"), "wb") as f:
        pickle.dump({"label_names": ["c%d" % i for i in range(10)], "num_vis": 3072}, f, protocol=protocol)


def tar(d, archive):
    order = ["data_batch_4", "readme.html", "test_batch", "data_batch_3", "batches.meta", "data_batch_2",
             "data_batch_5", "data_batch_1"]
    src = os.path.join(d, "cifar-10-batches-py")
    with open(os.path.join(src, "readme.html"), "w") as f:
        f.write("<html></html>\n")
    with tarfile.open(archive, "w:gz") as t:
        t.add(src, arcname="cifar-10-batches-py", recursive=False)
        for name in order:
            t.add(os.path.join(src, name), arcname="cifar-10-batches-py/" + name)


def torchvision_dump(d, out):
    import torchvision.datasets.cifar as cifar

    cifar.check_integrity = lambda *args, **kwargs: True  # the meta file's md5

    class Unchecked(cifar.CIFAR10):
        def _check_integrity(self):
            return True

    with open(out, "wb") as f, open(out + ".labels", "w") as labels:
        for train in (True, False):
            ds = Unchecked(d, train=train, download=False)
            f.write(np.ascontiguousarray(ds.data.transpose(0, 3, 1, 2)).tobytes())  # HWC -> CHW
            labels.write("".join("%d\n" % t for t in ds.targets))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "write":
        write(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]),
              sys.argv[7] == "numpy-labels")
        if len(sys.argv) > 8:
            torchvision_dump(sys.argv[2], sys.argv[8])
    elif cmd == "tar":
        tar(sys.argv[2], sys.argv[3])
    elif cmd == "torchvision":
        torchvision_dump(sys.argv[2], sys.argv[3])
    else:
        sys.exit("unknown command " + cmd)
