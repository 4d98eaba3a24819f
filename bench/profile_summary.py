"""Summarise py-spy collapsed stacks (`--format raw`): self and inclusive time per function.

    .venv/bin/python bench/profile_summary.py PROFILE [--top N] [--filter SUBSTRING]
"""

from __future__ import annotations

import argparse
import collections


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profile")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--filter", default="", help="only stacks containing this text")
    args = parser.parse_args()
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    with open(args.profile) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack or args.filter not in stack:
                continue
            n = int(count)
            frames = stack.split(";")
            total += n
            own[frames[-1]] += n
            for frame in set(frames):
                inclusive[frame] += n
    print(f"{total} samples")
    for title, counter in (("self", own), ("inclusive", inclusive)):
        print(f"\n{title}:")
        for frame, n in counter.most_common(args.top):
            print(f"  {100 * n / total:5.1f}%  {frame}")


if __name__ == "__main__":
    main()
