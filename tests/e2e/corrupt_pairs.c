/* Test shim for e2e/dgc_processes (LD_PRELOAD): a process that sends compression dgc pair
 * lists (runtime/replicas.c, pairs_head: magic "PACP", the replica, the count) sends the
 * count CORRUPT_PAIRS_COUNT in each list's head instead of its own, as a corrupt or hostile
 * peer would; the pairs that follow are left as they were. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define PAIRS_MAGIC 0x50414350u /* replicas.c's */

ssize_t send(int fd, const void *buf, size_t len, int flags)
{
    static ssize_t (*real_send)(int, const void *, size_t, int);
    if (!real_send)
        real_send = (ssize_t (*)(int, const void *, size_t, int))dlsym(RTLD_NEXT, "send");
    const char *count = getenv("CORRUPT_PAIRS_COUNT");
    uint32_t magic;
    // a list's head goes out in one call of its own: 16 bytes, the magic first
    if (count && len == 16 && (memcpy(&magic, buf, 4), magic == PAIRS_MAGIC)) {
        unsigned char head[16];
        int64_t bad = strtoll(count, NULL, 10);
        memcpy(head, buf, 8);
        memcpy(head + 8, &bad, 8);
        return real_send(fd, head, len, flags);
    }
    return real_send(fd, buf, len, flags);
}
