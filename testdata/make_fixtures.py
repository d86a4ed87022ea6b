"""Regenerates every committed PyTorch fixture (`make fixtures`).

Runs each package's own generator, `<package>/testdata/make*fixtures.py`, found anywhere in
the repository, from the repository root, with this interpreter (Debian's /usr/bin/python3
and its python3-torch 1.13). Add a fixture generator by dropping such a script beside the
package's tests; nothing here needs to change.
"""
import glob
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SELF = os.path.abspath(__file__)

scripts = sorted(p for p in glob.glob(os.path.join(ROOT, "**", "testdata", "make*fixtures.py"), recursive=True)
                 if os.path.abspath(p) != SELF)
for script in scripts:
    print("==>", os.path.relpath(script, ROOT), flush=True)
    subprocess.run([sys.executable, script], cwd=ROOT, check=True)
