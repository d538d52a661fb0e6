#!/usr/bin/env bash
# Downloads, on a Debian machine with network access, the packages the build needs that a
# GPU machine's image may lack (make; flex, bison and m4 for the grammar; OpenBLAS for the CPU
# path and every `run`; jansson for the JSON of run's Hugging Face import and export; PCRE2 for
# the GPT-2 tokenizer), into
# .gpu-deps/ (git ignores it, about 15 MB). Carry that folder with the device tool;
# tests/gpu/check.sh unpacks it into a scratch prefix (never /) when its preflight finds a
# tool missing.
set -euo pipefail
cd "$(dirname "$0")/../.." || exit 1
mkdir -p .gpu-deps
cd .gpu-deps
apt-get download make bison flex m4 libfl-dev libfl2 libopenblas-dev libopenblas-pthread-dev \
    libopenblas0-pthread libgfortran5 libjansson-dev libjansson4 libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
ls -l
