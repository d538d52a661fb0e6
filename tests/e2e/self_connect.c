/* Test shim for e2e/multiprocess (LD_PRELOAD): while nothing listens on SELF_CONNECT_PORT, a
 * connect() to it on loopback first binds the socket to that very address, so TCP's
 * simultaneous open connects the socket to itself. The kernel can do this by chance when the
 * master port lies in the ephemeral range and rank 0 is not up yet. Each self-connection
 * touches the file SELF_CONNECT_MARK. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

int connect(int fd, const struct sockaddr *to, socklen_t len)
{
    static int (*real_connect)(int, const struct sockaddr *, socklen_t);
    if (!real_connect)
        real_connect = (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "connect");
    const char *port = getenv("SELF_CONNECT_PORT"), *mark = getenv("SELF_CONNECT_MARK");
    int one = 1;
    // The bind fails once rank 0 listens on the port: the connect then goes to rank 0.
    if (port && to->sa_family == AF_INET &&
        ntohs(((const struct sockaddr_in *)to)->sin_port) == (unsigned)atoi(port) &&
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 && bind(fd, to, len) == 0 &&
        mark) {
        FILE *f = fopen(mark, "a");
        if (f)
            fclose(f);
    }
    return real_connect(fd, to, len);
}
