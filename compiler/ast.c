/* ast.c: the syntax tree's builders (called by grammar/parser.y), its destructors and
 * --dump ast. */
#include <stdlib.h>
#include <string.h>

#include "pacic.h"

/* Grows an array of n pointers to make room for one more: the capacity doubles whenever n
 * reaches a power of two, so appending stays linear without a capacity field. */
static void *grow(void *array, int n, size_t item_size)
{
    if (n == 0 || (n & (n - 1)) == 0)
        array = xrealloc(array, (size_t)(n ? 2 * n : 1) * item_size);
    return array;
}

static Value *value_new(ValueKind kind, Span span)
{
    Value *v = xcalloc(1, sizeof *v);
    v->kind = kind;
    v->span = span;
    return v;
}

Value *ast_number(Span span, const char *spelling, double number, bool is_integer, bool past_u64,
                  uint64_t magnitude)
{
    Value *v = value_new(VAL_NUMBER, span);
    v->text = xstrdup(spelling);
    v->number = number;
    v->is_integer = is_integer;
    v->past_u64 = past_u64;
    v->magnitude = magnitude;
    return v;
}

/* A percentage is stored as written: `12%` holds 12. */
Value *ast_percent(Span span, const char *spelling, double number)
{
    Value *v = value_new(VAL_PERCENT, span);
    v->text = xstrdup(spelling);
    v->number = number;
    return v;
}

Value *ast_string(Span span, char *unescaped)
{
    Value *v = value_new(VAL_STRING, span);
    v->text = unescaped;
    return v;
}

Value *ast_word(Span span, char *word)
{
    Value *v = value_new(VAL_WORD, span);
    v->text = word;
    return v;
}

Value *ast_list(Span open)
{
    return value_new(VAL_LIST, open);
}

/* The list's span grows to cover each item and finally the closing ']'. */
void ast_list_add(Value *list, Value *item, Span close_or_item)
{
    if (item) {
        list->items = grow(list->items, list->n_items, sizeof *list->items);
        list->items[list->n_items++] = item;
    }
    if (close_or_item.end > list->span.end)
        list->span.end = close_or_item.end;
}

Entry *ast_entry(char *key, Span key_span)
{
    Entry *e = xcalloc(1, sizeof *e);
    e->key = key;
    e->key_span = key_span;
    e->span = key_span;
    return e;
}

void ast_entry_add_value(Entry *entry, Value *value)
{
    entry->values = grow(entry->values, entry->n_values, sizeof *entry->values);
    entry->values[entry->n_values++] = value;
    if (value->span.end > entry->span.end)
        entry->span.end = value->span.end;
}

void ast_entry_set_block(Entry *entry, char *name, Span name_span, Block *block, Span close)
{
    block->name = name;
    block->name_span = name_span;
    entry->block = block;
    if (close.end > entry->span.end)
        entry->span.end = close.end;
}

Block *ast_block(Span open)
{
    Block *b = xcalloc(1, sizeof *b);
    b->open_span = open;
    b->name_span = (Span){-1, -1};
    return b;
}

void ast_block_add(Block *block, Entry *entry)
{
    block->entries = grow(block->entries, block->n_entries, sizeof *block->entries);
    block->entries[block->n_entries++] = entry;
}

void ast_value_free(Value *value)
{
    if (!value)
        return;
    for (int i = 0; i < value->n_items; i++)
        ast_value_free(value->items[i]);
    free(value->items);
    free(value->text);
    free(value);
}

void ast_entry_free(Entry *entry)
{
    if (!entry)
        return;
    for (int i = 0; i < entry->n_values; i++)
        ast_value_free(entry->values[i]);
    free(entry->values);
    ast_block_free(entry->block);
    free(entry->key);
    free(entry);
}

void ast_block_free(Block *block)
{
    if (!block)
        return;
    for (int i = 0; i < block->n_entries; i++)
        ast_entry_free(block->entries[i]);
    free(block->entries);
    free(block->name);
    free(block);
}

void ast_free(Ast *ast)
{
    if (!ast)
        return;
    ast_block_free(ast->root);
    free(ast);
}

static const char *const value_kind_names[] = {
    [VAL_NUMBER] = "number", [VAL_PERCENT] = "percent", [VAL_STRING] = "string",
    [VAL_WORD] = "word",     [VAL_LIST] = "list",
};

static void dump_indent(FILE *out, int depth)
{
    for (int i = 0; i < depth; i++)
        fputs("  ", out);
}

/* The tree dump's source, and a cursor that finds each node's line in one pass. */
typedef struct {
    const Source *src;
    LineCursor cursor;
} TreeDump;

static void dump_position(FILE *out, TreeDump *dump, Span span)
{
    int line, col;
    line_cursor_find(&dump->cursor, dump->src, span.begin, &line, &col);
    fprintf(out, "%d:%d", line, col);
}

/* Strings are dumped with the escapes the DSL accepts, so the dump is one line each. */
static void dump_quoted(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(out, "\\%c", *s);
        else if (*s == '\n')
            fputs("\\n", out);
        else
            fputc(*s, out);
    }
    fputc('"', out);
}

static void dump_value(FILE *out, TreeDump *dump, const Value *v, int depth)
{
    dump_indent(out, depth);
    dump_position(out, dump, v->span);
    fprintf(out, " %s ", value_kind_names[v->kind]);
    switch (v->kind) {
    case VAL_NUMBER:
        fprintf(out, "%s = %.15g%s\n", v->text, v->number, v->is_integer ? " (integer)" : "");
        break;
    case VAL_PERCENT:
        fprintf(out, "%s = %.15g%%\n", v->text, v->number);
        break;
    case VAL_STRING:
        dump_quoted(out, v->text);
        fputc('\n', out);
        break;
    case VAL_WORD:
        fprintf(out, "%s\n", v->text);
        break;
    case VAL_LIST:
        fprintf(out, "(%d items)\n", v->n_items);
        for (int i = 0; i < v->n_items; i++)
            dump_value(out, dump, v->items[i], depth + 1);
        break;
    }
}

static void dump_block(FILE *out, TreeDump *dump, const Block *b, int depth)
{
    for (int i = 0; i < b->n_entries; i++) {
        const Entry *e = b->entries[i];
        dump_indent(out, depth);
        dump_position(out, dump, e->key_span);
        if (e->block) {
            fprintf(out, " block %s", e->key);
            if (e->block->name)
                fprintf(out, " name %s", e->block->name);
            fputc('\n', out);
            dump_block(out, dump, e->block, depth + 1);
        } else {
            fprintf(out, " entry %s\n", e->key);
            for (int k = 0; k < e->n_values; k++)
                dump_value(out, dump, e->values[k], depth + 1);
        }
    }
}

/* One node per line, indented by nesting, each with the line:col where it starts. */
void ast_dump(FILE *out, const Source *src, const Ast *ast)
{
    fprintf(out, "file %s\n", src->path);
    TreeDump dump = {.src = src};
    dump_block(out, &dump, ast->root, 1);
}
