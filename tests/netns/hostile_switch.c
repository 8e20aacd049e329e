/*
 * hostile_switch: an Ethernet switch in user space that makes its links hostile, standing in for
 * `tc netem` where the kernel has no sch_netem (this machine's kernel is built without it).
 *
 * Usage: hostile_switch [-d DELAY_US] [-j JITTER_US] [-l LOSS_PCT] [-u DUP_PCT] [-r REORDER_PCT]
 *                       [-s SEED] PORT...
 * Runs in the namespace that holds the switch ends (PORT...) of the hosts' veth links; reads every
 * frame arriving on a port (AF_PACKET), learns source MAC addresses, and sends the frame out of
 * the port that has its destination (all other ports for broadcast, multicast and unknown
 * destinations), after applying, per frame, as netem does on an egress queue:
 *   -l  drop it with probability LOSS_PCT %;
 *   -u  send it twice with probability DUP_PCT %;
 *   -d  hold it DELAY_US microseconds, -j plus or minus up to JITTER_US (uniform), so frames can
 *       overtake each other;
 *   -r  with probability REORDER_PCT %, send it at once, ahead of the frames being held.
 * Percentages may be fractional. Frames must fit the ports' MTU: the hosts' veth ends need
 * segmentation and checksum offloads off (ethtool -K DEV tx off tso off gso off gro off), which
 * mpi-hosts.sh does. On SIGTERM or SIGINT it prints its counters ("frames N forwarded N dropped
 * N duplicated N reordered N") to stderr and exits 0.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_PORTS 16
#define MAX_FRAME 9216
#define MAX_HELD 65536 /* frames held at once; beyond that, new frames are dropped (tail drop) */
#define MAC_TABLE 256

struct held {
    uint64_t due_ns, seq;
    int port, len;
    unsigned char *frame;
};

static int nports, fds[MAX_PORTS], ifindex[MAX_PORTS];
static struct held heap[MAX_HELD];
static int nheld;
static uint64_t seq;
static struct {
    unsigned char mac[6];
    int port;
} macs[MAC_TABLE];
static int nmacs;
static unsigned long long n_frames, n_forwarded, n_dropped, n_duplicated, n_reordered,
    n_overflow;
static volatile sig_atomic_t stop;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* xorshift64*: reproducible with -s. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double uniform(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0;
}

static int earlier(const struct held *a, const struct held *b)
{
    return a->due_ns < b->due_ns || (a->due_ns == b->due_ns && a->seq < b->seq);
}

static void heap_push(struct held h)
{
    int i = nheld++;
    heap[i] = h;
    while (i > 0 && earlier(&heap[i], &heap[(i - 1) / 2])) {
        struct held t = heap[i];
        heap[i] = heap[(i - 1) / 2];
        heap[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

static struct held heap_pop(void)
{
    struct held top = heap[0];
    heap[0] = heap[--nheld];
    for (int i = 0;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < nheld && earlier(&heap[l], &heap[m])) {
            m = l;
        }
        if (r < nheld && earlier(&heap[r], &heap[m])) {
            m = r;
        }
        if (m == i) {
            break;
        }
        struct held t = heap[i];
        heap[i] = heap[m];
        heap[m] = t;
        i = m;
    }
    return top;
}

static void send_out(int port, const unsigned char *frame, int len)
{
    if (send(fds[port], frame, (size_t)len, 0) == len) {
        n_forwarded++;
    } else {
        n_dropped++; /* a port that is down, or a full queue: the frame is lost, as on a wire */
    }
}

static int lookup(const unsigned char *mac)
{
    for (int i = 0; i < nmacs; i++) {
        if (memcmp(macs[i].mac, mac, 6) == 0) {
            return macs[i].port;
        }
    }
    return -1;
}

static void learn(const unsigned char *mac, int port)
{
    if (mac[0] & 1) {
        return;
    }
    for (int i = 0; i < nmacs; i++) {
        if (memcmp(macs[i].mac, mac, 6) == 0) {
            macs[i].port = port;
            return;
        }
    }
    if (nmacs < MAC_TABLE) {
        memcpy(macs[nmacs].mac, mac, 6);
        macs[nmacs++].port = port;
    }
}

static double delay_us, jitter_us, loss_pct, dup_pct, reorder_pct;

/* Queues one copy of a frame for `port`: at once (reordered) or after the delay. */
static void schedule(int port, const unsigned char *frame, int len, uint64_t t)
{
    double d = delay_us;
    if (jitter_us > 0) {
        d += (2 * uniform() - 1) * jitter_us;
    }
    if (d < 0) {
        d = 0;
    }
    if (reorder_pct > 0 && uniform() * 100 < reorder_pct) {
        n_reordered++;
        d = 0;
    }
    if (d == 0 && nheld == 0) {
        send_out(port, frame, len);
        return;
    }
    if (nheld == MAX_HELD) {
        n_overflow++;
        n_dropped++;
        return;
    }
    unsigned char *copy = malloc((size_t)len);
    if (copy == NULL) {
        n_dropped++;
        return;
    }
    memcpy(copy, frame, (size_t)len);
    heap_push((struct held){t + (uint64_t)(d * 1000), seq++, port, len, copy});
}

static void forward(int in, const unsigned char *frame, int len)
{
    uint64_t t = now_ns();
    n_frames++;
    if (len < 14) {
        return;
    }
    learn(frame + 6, in);
    if (loss_pct > 0 && uniform() * 100 < loss_pct) {
        n_dropped++;
        return;
    }
    int copies = 1;
    if (dup_pct > 0 && uniform() * 100 < dup_pct) {
        copies = 2;
        n_duplicated++;
    }
    int out = (frame[0] & 1) ? -1 : lookup(frame);
    for (int c = 0; c < copies; c++) {
        for (int p = 0; p < nports; p++) {
            if (p != in && (out < 0 || out == p)) {
                schedule(p, frame, len, t);
            }
        }
    }
}

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static int open_port(const char *name, int *index)
{
    int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK, htons(ETH_P_ALL));
    if (fd < 0) {
        perror("hostile_switch: socket(AF_PACKET)");
        exit(1);
    }
    *index = (int)if_nametoindex(name);
    if (*index == 0) {
        fprintf(stderr, "hostile_switch: no port %s here\n", name);
        exit(1);
    }
    struct sockaddr_ll sll = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL),
                              .sll_ifindex = *index};
    if (bind(fd, (struct sockaddr *)&sll, sizeof(sll)) != 0) {
        perror("hostile_switch: bind");
        exit(1);
    }
    int one = 1;
    /* Frames this switch sends out of a port are not read back from it. */
    if (setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one)) != 0) {
        perror("hostile_switch: PACKET_IGNORE_OUTGOING");
        exit(1);
    }
    /* Bursts of a TCP window arrive faster than one loop turn: without room the kernel drops
     * them at this socket (counted in PACKET_STATISTICS), which the hosts would see as loss. */
    int bytes = 32 << 20;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes)) != 0) {
        perror("hostile_switch: socket buffers");
        exit(1);
    }
    struct packet_mreq mr = {.mr_ifindex = *index, .mr_type = PACKET_MR_PROMISC};
    if (setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof(mr)) != 0) {
        perror("hostile_switch: promiscuous mode");
        exit(1);
    }
    return fd;
}

int main(int argc, char **argv)
{
    int opt;
    while ((opt = getopt(argc, argv, "d:j:l:u:r:s:")) != -1) {
        switch (opt) {
        case 'd': delay_us = atof(optarg); break;
        case 'j': jitter_us = atof(optarg); break;
        case 'l': loss_pct = atof(optarg); break;
        case 'u': dup_pct = atof(optarg); break;
        case 'r': reorder_pct = atof(optarg); break;
        case 's': rng_state = strtoull(optarg, NULL, 0) | 1; break;
        default: goto usage;
        }
    }
    nports = argc - optind;
    if (nports < 2 || nports > MAX_PORTS || delay_us < 0 || jitter_us < 0 || loss_pct < 0 ||
        loss_pct > 100 || dup_pct < 0 || dup_pct > 100 || reorder_pct < 0 || reorder_pct > 100) {
        goto usage;
    }
    for (int p = 0; p < nports; p++) {
        fds[p] = open_port(argv[optind + p], &ifindex[p]);
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    fprintf(stderr, "hostile_switch: %d ports, delay %.0f us +- %.0f, loss %g %%, duplicate %g %%, "
                    "reorder %g %%\n", nports, delay_us, jitter_us, loss_pct, dup_pct, reorder_pct);

    static unsigned char frame[MAX_FRAME];
    struct pollfd pfd[MAX_PORTS];
    for (int p = 0; p < nports; p++) {
        pfd[p] = (struct pollfd){.fd = fds[p], .events = POLLIN};
    }
    while (!stop) {
        uint64_t t = now_ns();
        while (nheld > 0 && heap[0].due_ns <= t) {
            struct held h = heap_pop();
            send_out(h.port, h.frame, h.len);
            free(h.frame);
        }
        struct timespec wait = {1, 0};
        if (nheld > 0) {
            uint64_t left = heap[0].due_ns - t;
            wait = (struct timespec){(time_t)(left / 1000000000ull), (long)(left % 1000000000ull)};
        }
        int n = ppoll(pfd, (nfds_t)nports, &wait, NULL);
        if (n < 0 && errno != EINTR) {
            perror("hostile_switch: ppoll");
            return 1;
        }
        for (int p = 0; n > 0 && p < nports; p++) {
            if (!(pfd[p].revents & POLLIN)) {
                continue;
            }
            for (int k = 0; k < 64; k++) {
                ssize_t len = recv(fds[p], frame, sizeof(frame), 0);
                if (len < 0) {
                    break;
                }
                forward(p, frame, (int)len);
            }
        }
    }
    unsigned long long kernel_drops = 0;
    for (int p = 0; p < nports; p++) {
        struct tpacket_stats st;
        socklen_t len = sizeof(st);
        if (getsockopt(fds[p], SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0) {
            kernel_drops += st.tp_drops;
        }
    }
    fprintf(stderr, "hostile_switch: frames %llu forwarded %llu dropped %llu duplicated %llu "
                    "reordered %llu (queue overflow %llu, not read in time %llu)\n", n_frames,
            n_forwarded, n_dropped, n_duplicated, n_reordered, n_overflow, kernel_drops);
    return 0;
usage:
    fprintf(stderr, "usage: hostile_switch [-d DELAY_US] [-j JITTER_US] [-l LOSS_PCT] "
                    "[-u DUP_PCT] [-r REORDER_PCT] [-s SEED] PORT... (2 to %d ports)\n",
            MAX_PORTS);
    return 2;
}
