"""Writes nn/checkpoint/testdata/tiny_bn.npz: the state_dict of a tiny torch module with a
BatchNorm (after two training-mode forwards, so running stats are non-trivial and
num_batches_tracked is an int64 scalar of 2), saved exactly as users export torch models:

    numpy.savez(path, **{k: v.numpy() for k, v in model.state_dict().items()})

and mixed.npz with a float64 scalar, a float64 vector and an int32 vector. Run from the
repository root with Debian's python3-torch: /usr/bin/python3 nn/checkpoint/testdata/make_fixtures.py
"""
import os

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
torch.manual_seed(0)


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 4, 3, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        return self.fc(x.mean(dim=(2, 3)))


m = Tiny()
m.train()
for _ in range(2):
    m(torch.randn(2, 3, 5, 5))
np.savez(os.path.join(HERE, "tiny_bn.npz"), **{k: v.numpy() for k, v in m.state_dict().items()})
np.savez(os.path.join(HERE, "mixed.npz"), scalar=np.float64(2.5), vec=np.arange(3, dtype=np.float64) / 4,
         ints=np.array([-1, 2, 3], dtype=np.int32))
print("checkpoint fixtures:", list(m.state_dict().keys()))
