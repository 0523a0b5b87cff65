#define _GNU_SOURCE
// A measurement, not a proxy: the least an L4 relay in user space can do, to see what the
// `latency` and `connrate` scenarios of `cargo bench --bench peers` give for a proxy with no
// bookkeeping at all (docs/benchmarks-history.md, issue 28, rounds 5 and 12). One thread per CPU
// (SO_REUSEPORT listeners), one epoll each, level-triggered; every readable socket is read into
// a stack buffer and written to its peer at once, and the first end of file closes both
// sockets (no half-close). No routing (one upstream), no limits, no partial-write handling (the
// scenarios' messages always fit the send buffer). Run through run.sh. With EPOLL_NESTED=1 each
// thread's epoll is itself registered in an outer epoll, which is what the thread blocks in (as
// isthmus's splicer's epoll sat in tokio's): the cost of the nesting alone.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

static struct sockaddr_in la, ua;
static int peer[65536];

static void *worker(void *arg) {
  (void)arg;
  int one = 1, ep = epoll_create1(0), l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(l, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  if (bind(l, (void *)&la, sizeof la) || listen(l, 1024)) { perror("listen"); exit(1); }
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = l}, evs[64];
  epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev);
  char buf[16384];
  int outer = -1;
  if (getenv("EPOLL_NESTED")) {
    // Edge-triggered sockets, as mio registers them: a level-triggered one would re-raise the
    // outer epoll after every inner wait.
    ev.events = EPOLLIN | EPOLLET;
    outer = epoll_create1(0);
    struct epoll_event o = {.events = EPOLLIN | EPOLLET, .data.fd = ep};
    epoll_ctl(outer, EPOLL_CTL_ADD, ep, &o);
  }
  for (;;) {
    struct epoll_event o;
    if (outer >= 0 && epoll_wait(outer, &o, 1, -1) < 1) continue;
    int n = epoll_wait(ep, evs, 64, outer >= 0 ? 0 : -1);
    for (int i = 0; i < n; i++) {
      int fd = evs[i].data.fd;
      if (fd == l) {
        int c = accept4(l, NULL, NULL, SOCK_NONBLOCK);
        if (c < 0) continue;
        int u = socket(AF_INET, SOCK_STREAM, 0);  // blocking connect: loopback, immediate
        if (u >= 65536 || c >= 65536 || connect(u, (void *)&ua, sizeof ua)) { close(c); close(u); continue; }
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(u, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        peer[c] = u; peer[u] = c;
        ev.data.fd = c; epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
        ev.data.fd = u; epoll_ctl(ep, EPOLL_CTL_ADD, u, &ev);
        continue;
      }
      ssize_t r;
      for (;;) {
        r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (r <= 0) break;
        if (send(peer[fd], buf, r, MSG_NOSIGNAL) != r) { r = 0; break; }  // as if closed
        if (r < (ssize_t)sizeof buf) break;  // a short read drained it; later bytes raise an edge
      }
      if (r > 0 || (r < 0 && errno == EAGAIN)) continue;
      close(peer[fd]);  // closing removes both from the epoll set
      close(fd);
    }
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 6) { fprintf(stderr, "usage: epoll LIP LPORT UIP UPORT THREADS\n"); return 2; }
  la = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
  ua = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(atoi(argv[4]))};
  inet_pton(AF_INET, argv[1], &la.sin_addr);
  inet_pton(AF_INET, argv[3], &ua.sin_addr);
  int threads = atoi(argv[5]);
  pthread_t t;
  for (int i = 1; i < threads; i++) pthread_create(&t, NULL, worker, NULL);
  worker(NULL);
}
