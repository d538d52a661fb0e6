/* bpe.h: GPT-2's byte-level BPE tokenizer, read from the two files every GPT-2 distribution
 * carries: vocab.json (or OpenAI's encoder.json) and merges.txt (or vocab.bpe). Used by
 * `pacic tokenize --bpe` to write token files and by `run --sample` to encode a prompt and
 * decode what it samples. Needs only libc, PCRE2 and jansson, so both binaries can link it. */
#ifndef PACI_BPE_H
#define PACI_BPE_H

#include <stddef.h>
#include <stdint.h>

typedef struct bpe_tokenizer bpe_tokenizer;

/* A growing list of token ids. */
typedef struct bpe_ids {
    int32_t *ids;
    size_t n, cap;
} bpe_ids;

/* Reads DIR/vocab.json (or DIR/encoder.json) and DIR/merges.txt (or DIR/vocab.bpe). On
 * failure returns -1 with a message naming the file (and line) in err. */
int bpe_load(const char *dir, bpe_tokenizer **out, char *err, size_t err_size);
void bpe_free(bpe_tokenizer *tok);

int bpe_vocab_size(const bpe_tokenizer *tok);
/* The id of <|endoftext|>, the token between documents. */
int32_t bpe_end_of_text(const bpe_tokenizer *tok);

/* Appends the ids of TEXT (any bytes) to OUT, using up to THREADS threads over chunks whose
 * borders are borders of the pre-tokenizer too, so the ids do not depend on THREADS. A
 * literal "<|endoftext|>" in TEXT becomes that token. Returns 0, or -1 when out of memory. */
int bpe_encode(const bpe_tokenizer *tok, const char *text, size_t len, int threads, bpe_ids *out);

/* The bytes token ID stands for (NULL for an id outside the vocabulary). */
const unsigned char *bpe_token_bytes(const bpe_tokenizer *tok, int32_t id, size_t *len);

void bpe_ids_free(bpe_ids *ids);

#endif
