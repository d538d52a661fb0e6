/* Test shim for e2e/dgc_processes (LD_PRELOAD): a process that sends compression dgc pair
 * lists (runtime/replicas.c, pairs_head: magic "PACP", the replica, the count) sends the
 * count CORRUPT_PAIRS_COUNT in each list's head instead of its own, as a corrupt or hostile
 * peer would, the pairs that follow left as they were; or, with CORRUPT_PAIRS_OFFSET, the
 * head as it was and the list that follows (its next send: the list's words) with the last
 * pair's 16-bit offset replaced by that number. */
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
    static int list_next;
    if (!real_send)
        real_send = (ssize_t (*)(int, const void *, size_t, int))dlsym(RTLD_NEXT, "send");
    const char *count = getenv("CORRUPT_PAIRS_COUNT"), *offset = getenv("CORRUPT_PAIRS_OFFSET");
    uint32_t magic;
    // a list's head goes out in one call of its own: 16 bytes, the magic first
    int head = len == 16 && (memcpy(&magic, buf, 4), magic == PAIRS_MAGIC);
    if (count && head) {
        unsigned char bytes[16];
        int64_t bad = strtoll(count, NULL, 10);
        memcpy(bytes, buf, 8);
        memcpy(bytes + 8, &bad, 8);
        return real_send(fd, bytes, len, flags);
    }
    if (offset && list_next && len >= 8 && len % 4 == 0 && len <= 1 << 20) {
        static uint32_t words[1 << 18];
        memcpy(words, buf, len);
        words[len / 4 - 1] = (words[len / 4 - 1] & 0xffff0000u) | ((uint32_t)strtoul(offset, NULL, 10) & 0xffffu);
        list_next = 0;
        return real_send(fd, words, len, flags);
    }
    list_next = offset && head;
    return real_send(fd, buf, len, flags);
}
