// A measurement, not a proxy: an L4 relay whose bytes never reach user space, to see what the
// `latency` scenario of `cargo bench --bench peers` gives when the proxy's process is taken out
// of the data path altogether (docs/benchmarks-history.md, issue 28, round 5). Each accepted
// connection and its upstream connection join a two-slot BPF sockmap whose sk_skb verdict
// program redirects whatever arrives on one socket to the other's egress. No routing (one
// upstream), no limits, sockets never closed; the first bytes pass through user space like a
// ClientHello would.
// Run through run.sh (needs root for bpf(2)).
#include <arpa/inet.h>
#include <linux/bpf.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <poll.h>
static int bpf(int cmd, union bpf_attr *a) { return syscall(__NR_bpf, cmd, a, sizeof(*a)); }
#define INS(c, d, s, o, i) ((struct bpf_insn){.code = c, .dst_reg = d, .src_reg = s, .off = o, .imm = i})
static char log_buf[65536];
int main(int argc, char **argv) {
  if (argc != 5) { fprintf(stderr, "usage: relay LIP LPORT UIP UPORT\n"); return 2; }
  int lport = atoi(argv[2]);
  struct sockaddr_in la = {.sin_family = AF_INET, .sin_port = htons(lport)};
  inet_pton(AF_INET, argv[1], &la.sin_addr);
  struct sockaddr_in ua = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[4]))};
  inet_pton(AF_INET, argv[3], &ua.sin_addr);
  int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(l, (void *)&la, sizeof la) || listen(l, 1024)) { perror("listen"); return 1; }
  for (;;) {
    int c = accept(l, NULL, NULL);
    if (c < 0) continue;
    int u = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(u, (void *)&ua, sizeof ua)) { perror("connect"); close(c); close(u); continue; }
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(u, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    // Like a proxy reading the ClientHello: the first bytes are read before the sockets join
    // the map and written to the upstream after (an answer to them could otherwise come back
    // before the client's socket is in its slot, and be dropped).
    static char buf[65536];
    ssize_t first = 0;
    struct pollfd pf = {.fd = c, .events = POLLIN};
    if (poll(&pf, 1, 1000) == 1) first = recv(c, buf, sizeof buf, MSG_DONTWAIT);
    union bpf_attr a;
    memset(&a, 0, sizeof a);
    a.map_type = BPF_MAP_TYPE_SOCKMAP; a.key_size = 4; a.value_size = 4; a.max_entries = 2;
    int map = bpf(BPF_MAP_CREATE, &a);
    if (map < 0) { perror("map"); return 1; }
    struct bpf_insn p[] = {
        INS(BPF_LDX | BPF_MEM | BPF_W, 2, 1, 136, 0),   // r2 = skb->local_port
        INS(BPF_ALU64 | BPF_MOV | BPF_K, 3, 0, 0, 1),   // r3 = 1 (the upstream socket)
        INS(BPF_JMP | BPF_JEQ | BPF_K, 2, 0, 1, lport), // arrived on the client's socket?
        INS(BPF_ALU64 | BPF_MOV | BPF_K, 3, 0, 0, 0),   // no: to the client's socket
        INS(BPF_LD | BPF_DW | BPF_IMM, 2, BPF_PSEUDO_MAP_FD, 0, map),
        INS(0, 0, 0, 0, 0),
        INS(BPF_ALU64 | BPF_MOV | BPF_K, 4, 0, 0, 0),   // flags 0: egress of that socket
        INS(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_sk_redirect_map),
        INS(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
    };
    memset(&a, 0, sizeof a);
    a.prog_type = BPF_PROG_TYPE_SK_SKB; a.insns = (unsigned long)p; a.insn_cnt = sizeof p / sizeof p[0];
    a.license = (unsigned long)"GPL"; a.log_buf = (unsigned long)log_buf; a.log_size = sizeof log_buf; a.log_level = 1;
    int prog = bpf(BPF_PROG_LOAD, &a);
    if (prog < 0) { perror("prog"); fprintf(stderr, "%s\n", log_buf); return 1; }
    memset(&a, 0, sizeof a);
    a.target_fd = map; a.attach_bpf_fd = prog; a.attach_type = BPF_SK_SKB_VERDICT;
    if (bpf(BPF_PROG_ATTACH, &a)) { perror("attach"); return 1; }
    int fds[2] = {c, u};
    for (unsigned k = 2; k-- > 0;) { // the upstream first: a redirect to an empty slot drops
      memset(&a, 0, sizeof a);
      a.map_fd = map; a.key = (unsigned long)&k; a.value = (unsigned long)&fds[k]; a.flags = BPF_ANY;
      if (bpf(BPF_MAP_UPDATE_ELEM, &a)) { perror("update"); return 1; }
    }
    // Bytes that arrived between the first read and joining the map wait for the next arrival
    // (the verdict runs on data-ready); the harness's clients send nothing more until
    // answered, so pass them here, after the first bytes. A rare race remains: bytes arriving
    // after the map update and before these copies overtake them.
    if (first > 0 && send(u, buf, first, 0) != first) perror("send");
    ssize_t r = recv(c, buf, sizeof buf, MSG_DONTWAIT);
    if (r > 0 && send(u, buf, r, 0) != r) perror("send");
    close(prog); // the map holds the program; c, u and map stay open (a spike: never closed)
  }
}
