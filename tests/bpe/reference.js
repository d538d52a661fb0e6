// tiktoken's "gpt2" encoding, the reference for pacic's BPE (tests/e2e/bpe_tiktoken.sh and
// bench/bpe.sh). `node reference.js ids TEXT OUT`: writes <|endoftext|> and then the ids of
// TEXT (special tokens allowed), int32 little-endian, as pacic tokenize --bpe orders them.
// `node reference.js bench TEXT [ROUNDS]`: prints tiktoken's MB/s encoding TEXT (best of ROUNDS,
// default 3).
// `node reference.js encode TEXT` prints TEXT's ids; `node reference.js decode ID...` writes the
// ids' bytes to stdout (TEXT is a string here, not a file).
"use strict";
const fs = require("fs");
const { get_encoding } = require("tiktoken");
const enc = get_encoding("gpt2");
const [mode, textPath, outPath] = process.argv.slice(2);
const rounds = mode === "bench" && outPath ? Number(outPath) : 3;
if (mode === "encode") {
    console.log(Array.from(enc.encode(textPath, "all")).join(" "));
    process.exit(0);
}
if (mode === "decode") {
    process.stdout.write(Buffer.from(enc.decode(Uint32Array.from(process.argv.slice(3).map(Number)))));
    process.exit(0);
}
const text = fs.readFileSync(textPath, "utf8");
if (mode === "ids") {
    const ids = Int32Array.from([enc.encode("<|endoftext|>", "all")[0], ...enc.encode(text, "all")]);
    fs.writeFileSync(outPath, Buffer.from(ids.buffer));
} else if (mode === "bench") {
    const bytes = fs.statSync(textPath).size;
    let best = Infinity;
    for (let round = 0; round < rounds; round++) {
        const t0 = process.hrtime.bigint();
        enc.encode(text, "all");
        best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
    }
    console.log((bytes / 1e6 / best).toPrecision(3));
} else {
    console.error("usage: node reference.js ids TEXT OUT | bench TEXT [ROUNDS] | encode TEXT | decode ID...");
    process.exit(2);
}
