"""Cuts the shared data sets into parts for the tuning benchmarks, the same way each time:
lending_club (binary) by a seeded shuffle, chicago_ridership (regression) in time order (the last
rows are the latest days). Writes OUT/NAME_PART.csv for each part.

Usage: /usr/bin/python3 bench/split_shared_data.py DATA_DIR OUT_DIR PART=END [PART=END ...] PART
Each PART=END ends its part at that fraction of the rows; the last PART takes the rest.
Example: ... train=0.6 valid=0.8 test  -> 60/20/20.
"""
import csv
import random
import sys


def main():
    source, out, *parts = sys.argv[1:]
    cuts = [part.split("=") for part in parts[:-1]]
    for name, shuffle in (("lending_club", True), ("chicago_ridership", False)):
        with open(f"{source}/{name}.csv", newline="") as f:
            rows = list(csv.reader(f))
        header, body = rows[0], rows[1:]
        if shuffle:
            random.Random(0).shuffle(body)
        start = 0
        for part, end in cuts + [[parts[-1], "1"]]:
            stop = int(len(body) * float(end))
            with open(f"{out}/{name}_{part}.csv", "w", newline="") as f:
                writer = csv.writer(f)
                writer.writerow(header)
                writer.writerows(body[start:stop])
            start = stop


if __name__ == "__main__":
    main()
