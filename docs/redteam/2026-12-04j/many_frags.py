"""A legitimate message of N small fragments (N=20,000 x 16 B = 320 KB): Rust echoes it; Node (ws maxFragments 16,384) fails it with 1008."""
import sys, os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rt import *
from frag_budget_lib import honest_factory
HOST = sys.argv[1]; N = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
p, port = start(HOST); out = drain_output(p)
h = honest_factory(port)
print(HOST, f"{N} x 16 B fragments:", h(N * 16, frag=16), "| 16,384 x 16 B:", h(16384 * 16, frag=16))
kill(p)
