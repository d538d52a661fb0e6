/* util.c: allocation that cannot fail silently, text buffers for the emitters, files. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pacic.h"

static NORETURN void out_of_memory(size_t n)
{
    fprintf(stderr, "pacic: error: out of memory (%zu bytes)\n", n);
    exit(EXIT_INTERNAL);
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        out_of_memory(n);
    return p;
}

void *xcalloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        out_of_memory(count * size);
    return p;
}

void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p)
        out_of_memory(n);
    return p;
}

char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(xmalloc(n), s, n);
}

char *xasprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

void internal_error(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "pacic: internal error (%s:%d): ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nThis is a bug in pacic; please report it with the input file.\n");
    exit(EXIT_INTERNAL);
}

char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = xmalloc(cap);
    errno = 0;
    for (;;) {
        if (n + 1 >= cap)
            buf = xrealloc(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
    }
    int failed = ferror(f), reason = errno; // fread's own reason, e.g. EISDIR for a folder
    fclose(f);
    if (failed) {
        free(buf);
        errno = reason ? reason : EIO;
        return NULL;
    }
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

/* Opens without blocking (a FIFO would wait for a writer in open) and checks what the path is
 * before anything is read; regular files ignore O_NONBLOCK. */
int open_input_file(const char *path, size_t limit, char *why, size_t why_size)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(why, why_size, "%s", strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
        snprintf(why, why_size, "%s", strerror(EISDIR));
    } else if (!S_ISREG(st.st_mode)) {
        snprintf(why, why_size, "not a regular file");
    } else if ((uint64_t)st.st_size > limit) {
        snprintf(why, why_size, "%lld bytes, larger than the %zu MiB limit", (long long)st.st_size, limit >> 20);
    } else {
        return fd;
    }
    if (fd >= 0)
        close(fd);
    return -1;
}

char *read_input_file(const char *path, size_t limit, size_t *len, char *why, size_t why_size)
{
    int fd = open_input_file(path, limit, why, why_size);
    if (fd < 0)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = xmalloc(cap);
    for (;;) {
        if (n + 1 >= cap)
            buf = xrealloc(buf, cap *= 2);
        ssize_t got = read(fd, buf + n, cap - n - 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0 || n + (size_t)got > limit) { // a file that grew past the limit while read
            if (got < 0)
                snprintf(why, why_size, "%s", strerror(errno));
            else
                snprintf(why, why_size, "larger than the %zu MiB limit", limit >> 20);
            close(fd);
            free(buf);
            return NULL;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

static void sb_reserve(StrBuf *sb, size_t extra)
{
    if (sb->len + extra + 1 <= sb->cap)
        return;
    size_t cap = sb->cap ? sb->cap : 256;
    while (cap < sb->len + extra + 1)
        cap *= 2;
    sb->data = xrealloc(sb->data, cap);
    sb->cap = cap;
}

void sb_vprintf(StrBuf *sb, const char *fmt, va_list ap)
{
    va_list copy;
    va_copy(copy, ap);
    int n = vsnprintf(NULL, 0, fmt, copy);
    va_end(copy);
    sb_reserve(sb, (size_t)n);
    vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap);
    sb->len += (size_t)n;
}

void sb_printf(StrBuf *sb, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(sb, fmt, ap);
    va_end(ap);
}

void sb_puts(StrBuf *sb, const char *s)
{
    size_t n = strlen(s);
    sb_reserve(sb, n);
    memcpy(sb->data + sb->len, s, n + 1);
    sb->len += n;
}

static void sb_indent(StrBuf *sb)
{
    for (int i = 0; i < sb->indent; i++)
        sb_puts(sb, "    ");
}

void emit_line(StrBuf *sb, const char *fmt, ...)
{
    va_list ap;
    if (fmt[0])
        sb_indent(sb);
    va_start(ap, fmt);
    sb_vprintf(sb, fmt, ap);
    va_end(ap);
    sb_puts(sb, "\n");
}

void emit_open(StrBuf *sb, const char *fmt, ...)
{
    va_list ap;
    sb_indent(sb);
    va_start(ap, fmt);
    sb_vprintf(sb, fmt, ap);
    va_end(ap);
    sb_puts(sb, " {\n");
    sb->indent++;
}

void emit_close(StrBuf *sb, const char *text)
{
    sb->indent--;
    sb_indent(sb);
    sb_printf(sb, "}%s\n", text);
}

void sb_free(StrBuf *sb)
{
    free(sb->data);
    *sb = (StrBuf){0};
}

int write_file_atomic(const char *path, const void *data, size_t len)
{
    char *tmp = xasprintf("%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        free(tmp);
        return -1;
    }
    const char *p = data;
    size_t left = len;
    while (left > 0) {
        ssize_t n = write(fd, p, left);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            goto fail;
        }
        p += n;
        left -= (size_t)n;
    }
    if (fsync(fd) != 0)
        goto fail;
    if (close(fd) != 0) {
        fd = -1;
        goto fail;
    }
    if (rename(tmp, path) != 0) {
        fd = -1;
        goto fail;
    }
    free(tmp);
    return 0;
fail:;
    int saved = errno;
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    free(tmp);
    errno = saved;
    return -1;
}

/* Splits a top-level comma-separated list (parameters or arguments; none nests commas). */
int split_list(const char *text, char items[][128], int max)
{
    int n = 0;
    const char *p = text;
    while (*p && n < max) {
        while (*p == ' ')
            p++;
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len >= 128)
            ICE("kernel parameter or argument too long: %.*s", (int)len, p);
        memcpy(items[n], p, len);
        items[n][len] = '\0';
        n++;
        p += len + (end ? 1 : 0);
    }
    return n;
}
