#!/usr/bin/env python3
"""clang-tidy over the given sources, in parallel, skipping each source whose inputs have not
changed since it last passed: the file, every header it includes (ninja's dependency record of
its object), its compile command, .clang-tidy and the clang-tidy version, hashed by content (the
clone's own path left out, so a fresh clone on the same machine reuses the results). A source is
checked again whenever its object is older than any of those files (its includes may have
changed), or ninja has no record of it. A full run over the tree takes 13 minutes on two cores;
CI runs it after every change.

Usage: scripts/tidy_cached.py BUILD_DIR FILE...   (from the repository root; BUILD_DIR must be
built: its compile_commands.json and .ninja_deps say what each source includes)
Cache: $SLIPWAY_TIDY_CACHE, default ~/.cache/slipway-tidy (one empty file per passing input set).
"""
import hashlib
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor


def main():
    build, files = sys.argv[1], sys.argv[2:]
    root = os.getcwd()
    with open(os.path.join(build, "compile_commands.json")) as handle:
        entries = {os.path.realpath(os.path.join(e["directory"], e["file"])): e for e in json.load(handle)}
    cache = os.path.expanduser(os.environ.get("SLIPWAY_TIDY_CACHE", "~/.cache/slipway-tidy"))
    os.makedirs(cache, exist_ok=True)
    version = subprocess.run(["clang-tidy", "--version"], capture_output=True).stdout
    with open(".clang-tidy", "rb") as handle:
        common = hashlib.sha256(version + handle.read()).digest()

    def key(path):
        """The hash of everything the result depends on, or None when ninja has no record."""
        entry = entries.get(os.path.realpath(path))
        if entry is None:
            return None
        command = entry.get("command", " ".join(entry.get("arguments", [])))
        words = command.split()
        output = entry.get("output") or (words[words.index("-o") + 1] if "-o" in words else None)
        if output is None:
            return None
        listing = subprocess.run(["ninja", "-C", build, "-t", "deps", output], capture_output=True,
                                 text=True).stdout.splitlines()
        if not listing or "#deps" not in listing[0] or "(VALID)" not in listing[0]:
            return None  # never built, or built before its source changed: no trustworthy header list
        try:
            built = os.path.getmtime(os.path.join(build, output))
        except OSError:
            return None
        digest = hashlib.sha256(common)
        digest.update(command.replace(root, ".").encode())
        # Named relative to the clone and hashed in that order, so a clone elsewhere makes the same key.
        named = {}
        for dependency in {line.strip() for line in listing[1:] if line.strip()} | {os.path.realpath(path)}:
            absolute = os.path.realpath(os.path.join(build, dependency))
            named[os.path.relpath(absolute, root) if absolute.startswith(root + os.sep) else absolute] = absolute
        for name, absolute in sorted(named.items()):
            digest.update(name.encode())
            try:
                if os.path.getmtime(absolute) > built:
                    return None  # changed since the object was built: its includes may have changed too
                with open(absolute, "rb") as handle:
                    digest.update(hashlib.sha256(handle.read()).digest())
            except OSError:
                return None
        return digest.hexdigest()

    def report(output):
        lines = [line for line in output.splitlines() if "error:" in line or "Error" in line]
        return lines or output.splitlines()[-5:]

    def check(path):
        marker = key(path)
        if marker and os.path.exists(os.path.join(cache, marker)):
            return path, True, "", True
        run = subprocess.run(["clang-tidy", "-p", build, "--quiet", path], capture_output=True, text=True)
        if run.returncode == 0 and marker:
            open(os.path.join(cache, marker), "w").close()
        return path, run.returncode == 0, run.stdout + run.stderr, False

    jobs = int(os.environ.get("SLIPWAY_TIDY_JOBS", os.cpu_count() or 2))
    failed, reused = [], 0
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for path, passed, output, cached in pool.map(check, files):
            reused += cached
            if not passed:
                failed.append(path)
                print(f"{path}:")
                for line in report(output):
                    print("  " + line)
    print(f"clang-tidy: {len(files)} sources, {reused} unchanged since they passed, {len(failed)} failing")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
