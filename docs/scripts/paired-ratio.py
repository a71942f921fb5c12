#!/usr/bin/env python3
"""Ratio of two binaries' medians over alternated benchmark rounds.

Input lines are "ROUND BINARY BENCHMARK VALUE", as this loop writes them:

  for r in $(seq 1 40); do for v in base head; do
    nice -n -20 /tmp/hca-$v.test -test.run '^$' -test.bench 'BenchmarkRCPingPong64$' -test.benchtime 1s |
      awk -v v=$v -v r=$r '/^Benchmark/{print r, v, $1, $5}'
  done; done > runs.txt
  docs/scripts/paired-ratio.py runs.txt base head

For each benchmark it prints both medians, their ratio (B over A), the
median of the per-round ratios, and a bootstrap 95% interval of the ratio
of medians (5,000 resamples of the rounds, seeded: the same input gives
the same output), then every run.
"""
import collections
import random
import signal
import statistics
import sys


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quietly, into head
    if len(sys.argv) != 4:
        sys.exit("usage: paired-ratio.py FILE A B")
    path, a, b = sys.argv[1:]
    runs = collections.defaultdict(lambda: collections.defaultdict(dict))
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) != 4:
                continue
            try:
                runs[p[2]][p[1]][int(p[0])] = float(p[3])
            except ValueError:
                continue
    for bench, vs in runs.items():
        rounds = sorted(r for r in vs[a] if r in vs[b])
        if not rounds:
            continue
        xa = [vs[a][r] for r in rounds]
        xb = [vs[b][r] for r in rounds]
        ma, mb = statistics.median(xa), statistics.median(xb)
        paired = statistics.median(y / x for x, y in zip(xa, xb))
        rng = random.Random(1)
        boots = []
        for _ in range(5000):
            idx = [rng.randrange(len(xa)) for _ in xa]
            boots.append(statistics.median(xb[i] for i in idx) / statistics.median(xa[i] for i in idx))
        boots.sort()
        print(f"{bench}: {len(rounds)} rounds; median {a} {ma:.2f}, {b} {mb:.2f}; "
              f"ratio {mb / ma:.3f} (paired {paired:.3f}); 95% interval {boots[125]:.3f}-{boots[4875]:.3f}")
        print(f"  {a}: " + " ".join(f"{x:.2f}" for x in xa))
        print(f"  {b}: " + " ".join(f"{x:.2f}" for x in xb))


if __name__ == "__main__":
    main()
