# study/toolchain.sh: sourced by the study's drivers (run.sh, tuned.sh) once they have set
# root. A private copy of the installed-layout build, so a rebuild during the study changes
# nothing; pacic from it, and the Python that has the analysis's modules.
toolchain=$(mktemp -d)
trap 'rm -rf "$toolchain"' EXIT
cp -r "$root/build/bin" "$root/build/lib" "$root/build/include" "$toolchain/"
pacic=$toolchain/bin/pacic
python=${PYTHON:-/usr/bin/python3}
