/* parser.y: the DSL's grammar (docs/dsl.md). Actions only call the builders of ast.c;
 * every check of meaning happens later, in sema.c.
 *
 *   file   = body
 *   body   = { entry sep | block_entry | sep } [ entry ]      sep = end of line | ';'
 *   entry  = WORD value*                                       one line
 *   block_entry = WORD [WORD] '{' body '}'
 *   value  = scalar | '[' [ scalar { ',' scalar } [ ',' ] ] ']'
 *   scalar = NUMBER | PERCENT | STRING | WORD
 *
 * Newlines are dropped by the scanner inside '[...]' and right after '{', so lists and
 * blocks may span lines. Errors recover at the end of the entry or at the block's '}'.
 */
%define api.pure full
%define api.prefix {paci_}
%define api.location.type {Span}
%define parse.error custom
%define parse.lac full
%locations
%expect 0

%param {yyscan_t scanner}
%parse-param {LexState *lex} {Block **result}

%code requires {
#include "pacic.h"

typedef void *yyscan_t;

/* Past this many lexical or syntax errors the input is hardly a .paci file: stop rather
 * than flood (and spend quadratic time placing messages in a huge file). */
enum { LEX_MAX_ERRORS = 20 };

/* One '{' the scanner has seen and not yet closed. */
typedef struct OpenBlock {
    Span open;     /* the '{' */
    Span key;      /* the key of the block: `train` in `train {`, `model` in `model x {` */
} OpenBlock;

/* The scanner's state, shared with the parser's error reporting. */
typedef struct LexState {
    const Source *src;
    int offset;          /* bytes scanned so far */
    int list_depth;      /* open '[': newlines are dropped inside */
    int last_token;      /* the previous token returned (0 at the start) */
    Span last_span;
    Span last_visible;   /* the last token that is not an end of line: errors at EOF point here */
    bool stray_close;    /* the last '}' closed no block */
    int prev_kinds[2];   /* the two tokens before the current one, for a block's key */
    Span prev_spans[2];
    OpenBlock open[AST_MAX_NESTING];
    int n_open;
    int n_errors;        /* lexical and syntax errors so far */
    bool fatal;          /* an error that stops the parse was reported (nesting, flood) */
} LexState;

/* Merges the spans of a rule's symbols; an empty rule sits at the end of what precedes it. */
#define YYLLOC_DEFAULT(Cur, Rhs, N)                                                        \
    do {                                                                                   \
        if (N) {                                                                           \
            (Cur).begin = YYRHSLOC(Rhs, 1).begin;                                          \
            (Cur).end = YYRHSLOC(Rhs, N).end;                                              \
        } else {                                                                           \
            (Cur).begin = (Cur).end = YYRHSLOC(Rhs, 0).end;                                \
        }                                                                                  \
    } while (0)
}

%code provides {
void lex_state_init(LexState *lex, const Source *src);
}

%code {
#include <stdlib.h>
#include <string.h>

#include "lexer.h"

/* Bison's own errors (its stack exhausted): everything else goes through
 * yyreport_syntax_error. */
static void paci_error(const Span *where, yyscan_t scanner, LexState *lex, Block **result,
                       const char *message)
{
    (void)scanner;
    (void)result;
    error_at(lex->src, *where, "%s", message);
}
}

%union {
    char *text;
    Value *value;
    Entry *entry;
    Block *block;
}

%token END 0           "end of file"
%token <text> WORD     "word"
%token <value> NUMBER  "number"
%token <value> PERCENT "percentage"
%token <value> STRING  "string"
%token NEWLINE         "end of line"
%token ';' '{' '}' '[' ']' ','

%type <block> body
%type <entry> entry entry_values block_entry
%type <value> value scalar list list_items
%type <text> block_name

%destructor { free($$); } <text>
%destructor { ast_value_free($$); } <value>
%destructor { ast_entry_free($$); } <entry>
%destructor { ast_block_free($$); } <block>

%%

file
    : body              { *result = $1; }
    | body entry        { ast_block_add($1, $2); *result = $1; }
    ;

body
    : %empty                    { $$ = ast_block(@$); }
    | body sep                  { $$ = $1; }
    | body entry sep            { ast_block_add($1, $2); $$ = $1; }
    | body block_entry          { ast_block_add($1, $2); $$ = $1; }
    | body error sep            { $$ = $1; yyerrok; }
    ;

sep
    : NEWLINE
    | ';'
    ;

/* The values are gathered before deciding between an entry and a block's name, so that
 * `schedule paci` and `model gpt2 {` need one token of lookahead only. */
entry
    : WORD                      { $$ = ast_entry($1, @1); }
    | entry_values
    ;

entry_values
    : WORD value                { $$ = ast_entry($1, @1); ast_entry_add_value($$, $2); }
    | entry_values value        { ast_entry_add_value($1, $2); $$ = $1; }
    ;

block_entry
    : WORD block_name '{' body '}'
        { $$ = ast_entry($1, @1); ast_entry_set_block($$, $2, @2, $4, @5); $4->open_span = @3; }
    | WORD block_name '{' body entry '}'
        { ast_block_add($4, $5); $$ = ast_entry($1, @1);
          ast_entry_set_block($$, $2, @2, $4, @6); $4->open_span = @3; }
    | WORD block_name '{' body error '}'
        { $$ = ast_entry($1, @1); ast_entry_set_block($$, $2, @2, $4, @6); $4->open_span = @3; }
    ;

block_name
    : %empty                    { $$ = NULL; }
    | WORD                      { $$ = $1; }
    ;

value
    : scalar
    | list
    ;

/* Lists hold scalars only: no nesting to bound. */
scalar
    : NUMBER
    | PERCENT
    | STRING
    | WORD                      { $$ = ast_word(@1, $1); }
    ;

list
    : '[' ']'                   { $$ = ast_list(@1); ast_list_add($$, NULL, @2); }
    | list_items ']'            { $$ = $1; ast_list_add($$, NULL, @2); }
    | list_items ',' ']'        { $$ = $1; ast_list_add($$, NULL, @3); }
    ;

list_items
    : '[' scalar                { $$ = ast_list(@1); ast_list_add($$, $2, @2); }
    | list_items ',' scalar     { $$ = $1; ast_list_add($$, $3, @3); }
    ;

%%

/* How a token reads in a message: "'}'", "end of line", "word 'lr'". */
static void describe_token(StrBuf *sb, const LexState *lex, yysymbol_kind_t kind, Span span)
{
    switch (kind) {
    case YYSYMBOL_WORD:
        sb_printf(sb, "word '%.*s'", span.end - span.begin, lex->src->text + span.begin);
        break;
    case YYSYMBOL_NUMBER:
    case YYSYMBOL_PERCENT:
        sb_printf(sb, "%s %.*s", yysymbol_name(kind), span.end - span.begin,
                  lex->src->text + span.begin);
        break;
    default:
        sb_puts(sb, yysymbol_name(kind));
    }
}

/* Value tokens are named together as "a value" when all of them would do. */
static bool is_value_start(yysymbol_kind_t kind)
{
    return kind == YYSYMBOL_NUMBER || kind == YYSYMBOL_PERCENT || kind == YYSYMBOL_STRING ||
           kind == YYSYMBOL_WORD || strcmp(yysymbol_name(kind), "'['") == 0;
}

/* "unexpected X, expecting Y or Z"; at the end of the file with a block open, the block
 * that lacks its '}' and the line it opened on. */
static int yyreport_syntax_error(const yypcontext_t *ctx, yyscan_t scanner, LexState *lex,
                                 Block **result)
{
    (void)scanner;
    (void)result;
    if (lex->fatal)
        return 0;
    yysymbol_kind_t token = yypcontext_token(ctx);
    const Span *where = yypcontext_location(ctx);
    if (token == YYSYMBOL_YYEOF && lex->n_open > 0) {
        const OpenBlock *b = &lex->open[lex->n_open - 1];
        int line, col;
        diag_line_col(lex->src, b->open.begin, &line, &col);
        Span at = {lex->last_visible.end, lex->last_visible.end};
        error_at(lex->src, at, "'}' expected to close '%.*s' block opened at line %d",
                 b->key.end - b->key.begin, lex->src->text + b->key.begin, line);
        return 0;
    }
    if (lex->stray_close && strcmp(yysymbol_name(token), "'}'") == 0) {
        error_at(lex->src, *where, "unexpected '}': no block is open here");
        return 0;
    }
    enum { MAX_EXPECTED = 16 }; /* more than any state expects, so none is left out */
    yysymbol_kind_t expected[MAX_EXPECTED];
    int n = yypcontext_expected_tokens(ctx, expected, MAX_EXPECTED);
    StrBuf msg = {0};
    sb_puts(&msg, "unexpected ");
    describe_token(&msg, lex, token, *where);
    if (n > 0) {
        int n_values = 0;
        for (int i = 0; i < n; i++)
            n_values += is_value_start(expected[i]);
        bool as_value = n_values == 5;
        const char *names[MAX_EXPECTED];
        int n_names = 0;
        if (as_value)
            names[n_names++] = "a value";
        for (int i = 0; i < n; i++)
            if (!(as_value && is_value_start(expected[i])))
                names[n_names++] = yysymbol_name(expected[i]);
        sb_puts(&msg, ", expecting ");
        for (int i = 0; i < n_names; i++) {
            if (i > 0)
                sb_puts(&msg, i == n_names - 1 ? " or " : ", ");
            sb_puts(&msg, names[i]);
        }
    }
    Span at = *where;
    if (token == YYSYMBOL_YYEOF || token == YYSYMBOL_NEWLINE) /* point after the last token */
        at = (Span){lex->last_visible.end, lex->last_visible.end};
    error_at(lex->src, at, "%s", msg.data);
    sb_free(&msg);
    if (++lex->n_errors >= LEX_MAX_ERRORS) {
        error_at(lex->src, at, "too many errors; is this a .paci file?");
        lex->fatal = true;
    }
    return 0;
}

Ast *parse_source(const Source *src)
{
    int errors_before = diag_error_count();
    LexState lex;
    lex_state_init(&lex, src);
    yyscan_t scanner;
    if (paci_lex_init_extra(&lex, &scanner) != 0)
        ICE("cannot start the scanner");
    YY_BUFFER_STATE buffer = paci__scan_bytes(src->text, (int)src->len, scanner);
    Block *root = NULL;
    int status = paci_parse(scanner, &lex, &root);
    paci__delete_buffer(buffer, scanner);
    paci_lex_destroy(scanner);
    if (status == 2)
        ICE("parser ran out of memory");
    if (status != 0 || diag_error_count() > errors_before) {
        ast_block_free(root);
        return NULL;
    }
    Ast *ast = xcalloc(1, sizeof *ast);
    ast->root = root;
    return ast;
}
