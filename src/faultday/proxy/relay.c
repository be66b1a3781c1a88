/*
 * faultday's native relay: the no-toxic fast path of the fault proxy.
 *
 * Why C: with no toxic on an edge the proxy only moves bytes. Doing that from
 * Python costs an event-loop callback per chunk and per connection, which is
 * what kept the proxy from beating Toxiproxy on round-trip tail latency,
 * many-connection throughput and connect time (bench/proxy). No library does
 * "epoll + splice(2) between socket pairs, handed over to Python on demand",
 * so this file does exactly that and nothing more.
 *
 * One thread per relay, one epoll set. Python (faultday/proxy/native.py)
 * adopts a connected socket pair for one proxy (fr_adopt, with the proxy's
 * owner id) and takes all of that proxy's connections back (fr_take) when a
 * toxic must act on them. A connection whose first bytes are an HTTP request
 * (HTTP edges are framed and counted in Python) is set aside, and a note on a
 * pipe wakes Python to take it (fr_take_handoffs). A connection that ends
 * here is closed and freed here: Python hears nothing per connection.
 * Counters are a per-proxy uint64[5] array that only this thread writes:
 * bytes received up, sent up, received down, sent down; connections closed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define FR_ABI 2
#define PIPE_SIZE (1 << 20)
#define POOL_MAX 128
#define MAX_EVENTS 256
#define SPLICE_FLAGS (SPLICE_F_MOVE | SPLICE_F_NONBLOCK)

enum { UP = 0, DOWN = 1 };
enum { KIND_UNKNOWN = 0, KIND_TCP = 1, KIND_HTTP = 2 };
enum { LIVE = 0, HANDOFF = 1, DEAD = 2, RELEASED = 3 };
enum { NOTE_HTTP = 2 };
enum { C_CLOSED = 4 }; /* counters[4]: connections closed here */

struct fr_conn;

struct fr_end { /* epoll data of one socket */
    struct fr_conn *conn;
    int side; /* 0 = client, 1 = upstream */
};

struct fr_dir {
    int src, dst;
    int pipe_r, pipe_w;
    int64_t in_pipe; /* bytes taken from src, not yet written to dst */
    int eof;         /* src ended */
    int done;        /* everything passed on and dst half-closed */
};

struct fr_conn {
    int owner;
    struct fr_conn *prev, *next; /* the connections this relay holds */
    int fd[2];
    int registered[2];
    uint32_t interest[2];
    struct fr_dir dir[2];
    struct fr_end end[2];
    uint64_t *counters;
    int kind;
    int state;
    struct fr_conn *next_zombie;
};

struct fr_note {
    uint32_t kind;
    int32_t owner;
};

/* What fr_release hands back; mirrored by a ctypes Structure in native.py. */
struct fr_state {
    int32_t fd[2];
    int32_t pipe_r[2];
    int32_t pipe_w[2];
    int64_t in_pipe[2];
    int32_t eof[2];
    int32_t done[2];
    int32_t kind;
    int32_t owner;
};

struct fr_relay {
    int ep;
    int wake; /* eventfd: stop the thread */
    int notify; /* write end of Python's note pipe */
    pthread_t thread;
    pthread_mutex_t lock;
    int pool[POOL_MAX][2];
    int pooled;
    struct fr_conn *zombies;
    struct fr_conn *conns;
    struct fr_note notes[MAX_EVENTS];
    int nnotes;
};

int fr_abi(void) { return FR_ABI; }

/* ---- pipes ------------------------------------------------------------------------ */
static int pipe_get(struct fr_relay *r, struct fr_dir *d) {
    if (r->pooled > 0) {
        r->pooled--;
        d->pipe_r = r->pool[r->pooled][0];
        d->pipe_w = r->pool[r->pooled][1];
        return 0;
    }
    int p[2];
    if (pipe2(p, O_NONBLOCK | O_CLOEXEC) < 0)
        return -1;
    fcntl(p[1], F_SETPIPE_SZ, PIPE_SIZE); /* best effort: a smaller pipe still works */
    d->pipe_r = p[0];
    d->pipe_w = p[1];
    return 0;
}

static void pipe_put(struct fr_relay *r, struct fr_dir *d) {
    if (d->pipe_r < 0)
        return;
    if (d->in_pipe == 0 && r->pooled < POOL_MAX) {
        r->pool[r->pooled][0] = d->pipe_r;
        r->pool[r->pooled][1] = d->pipe_w;
        r->pooled++;
    } else {
        close(d->pipe_r);
        close(d->pipe_w);
    }
    d->pipe_r = d->pipe_w = -1;
}

/* ---- one connection --------------------------------------------------------------- */
static void note(struct fr_relay *r, struct fr_conn *c, uint32_t kind) {
    /* A connection leaves LIVE once, so a batch of n events makes at most n notes. */
    if (r->nnotes < MAX_EVENTS) {
        r->notes[r->nnotes].kind = kind;
        r->notes[r->nnotes].owner = c->owner;
        r->nnotes++;
    }
}

static void unregister(struct fr_relay *r, struct fr_conn *c) {
    for (int s = 0; s < 2; s++) {
        if (c->registered[s]) {
            epoll_ctl(r->ep, EPOLL_CTL_DEL, c->fd[s], NULL);
            c->registered[s] = 0;
        }
    }
}

static void unlink_conn(struct fr_relay *r, struct fr_conn *c, int state) {
    /* Off the list; freed once the thread's current batch (which may name it) is done. */
    if (c->prev)
        c->prev->next = c->next;
    else
        r->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    c->state = state;
    c->next_zombie = r->zombies;
    r->zombies = c;
}

static void close_conn(struct fr_relay *r, struct fr_conn *c) {
    unregister(r, c);
    for (int s = 0; s < 2; s++) {
        close(c->fd[s]);
        c->fd[s] = -1;
        pipe_put(r, &c->dir[s]);
    }
    c->counters[C_CLOSED] += 1;
    unlink_conn(r, c, DEAD);
}

static void update_interest(struct fr_relay *r, struct fr_conn *c, uint32_t hup_seen) {
    for (int s = 0; s < 2; s++) {
        struct fr_dir *src = &c->dir[s];     /* this socket is its source */
        struct fr_dir *dst = &c->dir[1 - s]; /* this socket is its destination */
        uint32_t want = 0;
        if (!src->eof && src->in_pipe == 0)
            want |= EPOLLIN;
        if (dst->in_pipe > 0)
            want |= EPOLLOUT;
        if (!c->registered[s])
            continue;
        if (want == 0 && (hup_seen & (1u << s))) {
            /* Hung up and nothing left to do on it: level-triggered HUP would spin. */
            epoll_ctl(r->ep, EPOLL_CTL_DEL, c->fd[s], NULL);
            c->registered[s] = 0;
            continue;
        }
        if (want != c->interest[s]) {
            struct epoll_event ev = {.events = want, .data.ptr = &c->end[s]};
            epoll_ctl(r->ep, EPOLL_CTL_MOD, c->fd[s], &ev);
            c->interest[s] = want;
        }
    }
}

static void finish(struct fr_relay *r, struct fr_conn *c, int d) {
    struct fr_dir *dir = &c->dir[d];
    shutdown(dir->dst, SHUT_WR);
    dir->done = 1;
    if (c->dir[UP].done && c->dir[DOWN].done)
        close_conn(r, c);
}

static int looks_http(const char *b, ssize_t n) {
    /* The same rule as relay.py's _looks_http: "METHOD " with a known method. */
    static const char *methods[] = {"GET",  "POST",    "PUT",     "DELETE", "HEAD",
                                    "OPTIONS", "PATCH", "CONNECT", "TRACE"};
    ssize_t i = 0;
    while (i < n && i < 10 && b[i] >= 'A' && b[i] <= 'Z')
        i++;
    if (i < 3 || i >= n || b[i] != ' ')
        return 0;
    for (size_t m = 0; m < sizeof methods / sizeof *methods; m++)
        if (strlen(methods[m]) == (size_t)i && memcmp(methods[m], b, (size_t)i) == 0)
            return 1;
    return 0;
}

static void flush(struct fr_relay *r, struct fr_conn *c, int d) {
    struct fr_dir *dir = &c->dir[d];
    while (dir->in_pipe > 0) {
        ssize_t m = splice(dir->pipe_r, NULL, dir->dst, NULL, (size_t)dir->in_pipe, SPLICE_FLAGS);
        if (m < 0) {
            if (errno == EAGAIN || errno == EINTR)
                return;
            close_conn(r, c);
            return;
        }
        dir->in_pipe -= m;
        c->counters[2 * d + 1] += (uint64_t)m;
    }
    if (dir->eof && !dir->done)
        finish(r, c, d);
}

static void pump(struct fr_relay *r, struct fr_conn *c, int d) {
    struct fr_dir *dir = &c->dir[d];
    if (dir->eof || dir->in_pipe > 0)
        return;
    if (c->kind == KIND_UNKNOWN) {
        if (d == DOWN) {
            c->kind = KIND_TCP; /* the server spoke first: not HTTP */
        } else {
            char peek[16];
            ssize_t k = recv(dir->src, peek, sizeof peek, MSG_PEEK | MSG_DONTWAIT);
            if (k < 0) {
                if (errno == EAGAIN || errno == EINTR)
                    return;
                close_conn(r, c);
                return;
            }
            if (k > 0 && looks_http(peek, k)) {
                unregister(r, c);
                c->state = HANDOFF;
                note(r, c, NOTE_HTTP);
                return;
            }
            c->kind = KIND_TCP;
        }
    }
    if (dir->pipe_w < 0 && pipe_get(r, dir) < 0) {
        close_conn(r, c);
        return;
    }
    ssize_t n = splice(dir->src, NULL, dir->pipe_w, NULL, PIPE_SIZE, SPLICE_FLAGS);
    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR)
            return;
        close_conn(r, c);
        return;
    }
    if (n == 0) {
        dir->eof = 1;
        finish(r, c, d);
        return;
    }
    c->counters[2 * d] += (uint64_t)n;
    ssize_t m = splice(dir->pipe_r, NULL, dir->dst, NULL, (size_t)n, SPLICE_FLAGS);
    if (m < 0) {
        if (errno != EAGAIN && errno != EINTR) {
            close_conn(r, c);
            return;
        }
        m = 0;
    }
    c->counters[2 * d + 1] += (uint64_t)m;
    dir->in_pipe = n - m;
}

static void handle(struct fr_relay *r, struct fr_conn *c, int side, uint32_t events) {
    if (events & EPOLLERR) {
        close_conn(r, c);
        return;
    }
    if (events & EPOLLOUT)
        flush(r, c, 1 - side);
    if (c->state == LIVE && (events & (EPOLLIN | EPOLLHUP | EPOLLRDHUP)))
        pump(r, c, side);
    if (c->state == LIVE)
        update_interest(r, c, (events & EPOLLHUP) ? (1u << side) : 0);
}

static void free_zombies(struct fr_relay *r) {
    while (r->zombies) {
        struct fr_conn *z = r->zombies;
        r->zombies = z->next_zombie;
        free(z);
    }
}

static void send_notes(struct fr_relay *r) {
    /* Outside the lock: Python drains the pipe without ever needing it. */
    const char *p = (const char *)r->notes;
    size_t left = (size_t)r->nnotes * sizeof(struct fr_note);
    while (left > 0) {
        ssize_t w = write(r->notify, p, left);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) {
                struct pollfd pfd = {.fd = r->notify, .events = POLLOUT};
                poll(&pfd, 1, 100);
                continue;
            }
            break; /* Python closed its end: it is shutting down */
        }
        p += w;
        left -= (size_t)w;
    }
    r->nnotes = 0;
}

static void *relay_main(void *arg) {
    struct fr_relay *r = arg;
    struct epoll_event ev[MAX_EVENTS];
    int stop = 0;
    while (!stop) {
        int n = epoll_wait(r->ep, ev, MAX_EVENTS, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        pthread_mutex_lock(&r->lock);
        for (int i = 0; i < n; i++) {
            if (ev[i].data.ptr == NULL) {
                stop = 1;
                continue;
            }
            struct fr_end *e = ev[i].data.ptr;
            if (e->conn->state == LIVE)
                handle(r, e->conn, e->side, ev[i].events);
        }
        free_zombies(r);
        pthread_mutex_unlock(&r->lock);
        send_notes(r);
    }
    return NULL;
}

/* ---- the API Python calls --------------------------------------------------------- */
struct fr_relay *fr_open(int notify_fd) {
    struct fr_relay *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->notify = notify_fd;
    r->ep = epoll_create1(EPOLL_CLOEXEC);
    r->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (r->ep < 0 || r->wake < 0)
        goto fail;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(r->ep, EPOLL_CTL_ADD, r->wake, &ev) < 0)
        goto fail;
    pthread_mutex_init(&r->lock, NULL);
    if (pthread_create(&r->thread, NULL, relay_main, r) != 0) {
        pthread_mutex_destroy(&r->lock);
        goto fail;
    }
    return r;
fail:
    if (r->ep >= 0)
        close(r->ep);
    if (r->wake >= 0)
        close(r->wake);
    free(r);
    return NULL;
}

/* Take over a connected, non-blocking socket pair of proxy `owner`: 0, or -1 (errno). */
int fr_adopt(struct fr_relay *r, int client, int upstream, uint64_t *counters, int owner) {
    struct fr_conn *c = calloc(1, sizeof *c);
    if (!c)
        return -1;
    c->owner = owner;
    c->fd[0] = client;
    c->fd[1] = upstream;
    c->counters = counters;
    c->kind = KIND_UNKNOWN;
    c->state = LIVE;
    for (int s = 0; s < 2; s++) {
        c->end[s].conn = c;
        c->end[s].side = s;
        c->dir[s].src = c->fd[s];
        c->dir[s].dst = c->fd[1 - s];
        c->dir[s].pipe_r = c->dir[s].pipe_w = -1;
    }
    pthread_mutex_lock(&r->lock);
    for (int s = 0; s < 2; s++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &c->end[s]};
        if (epoll_ctl(r->ep, EPOLL_CTL_ADD, c->fd[s], &ev) < 0) {
            int err = errno;
            unregister(r, c);
            pthread_mutex_unlock(&r->lock);
            free(c);
            errno = err;
            return -1;
        }
        c->registered[s] = 1;
        c->interest[s] = EPOLLIN;
    }
    c->next = r->conns;
    if (r->conns)
        r->conns->prev = c;
    r->conns = c;
    pthread_mutex_unlock(&r->lock);
    return 0;
}

static void hand_back(struct fr_relay *r, struct fr_conn *c, struct fr_state *st) {
    unregister(r, c);
    for (int s = 0; s < 2; s++) {
        st->fd[s] = c->fd[s];
        st->pipe_r[s] = c->dir[s].pipe_r;
        st->pipe_w[s] = c->dir[s].pipe_w;
        st->in_pipe[s] = c->dir[s].in_pipe;
        st->eof[s] = c->dir[s].eof;
        st->done[s] = c->dir[s].done;
    }
    st->kind = c->state == HANDOFF ? KIND_HTTP : c->kind;
    st->owner = c->owner;
    unlink_conn(r, c, RELEASED);
}

/* Hand back up to `max` connections of proxy `owner` (any state but closed):
 * their sockets and pipes are Python's now. Returns how many. */
int fr_take(struct fr_relay *r, int owner, struct fr_state *out, int max) {
    int n = 0;
    pthread_mutex_lock(&r->lock);
    struct fr_conn *c = r->conns;
    while (c && n < max) {
        struct fr_conn *next = c->next;
        if (c->owner == owner)
            hand_back(r, c, &out[n++]);
        c = next;
    }
    pthread_mutex_unlock(&r->lock);
    return n;
}

/* Hand back up to `max` connections set aside because they speak HTTP. */
int fr_take_handoffs(struct fr_relay *r, struct fr_state *out, int max) {
    int n = 0;
    pthread_mutex_lock(&r->lock);
    struct fr_conn *c = r->conns;
    while (c && n < max) {
        struct fr_conn *next = c->next;
        if (c->state == HANDOFF)
            hand_back(r, c, &out[n++]);
        c = next;
    }
    pthread_mutex_unlock(&r->lock);
    return n;
}

/* Stop the thread; close whatever Python did not take back. */
void fr_close(struct fr_relay *r) {
    uint64_t one = 1;
    if (write(r->wake, &one, sizeof one) < 0) {
        /* eventfd writes only fail on overflow; the thread is stopping anyway */
    }
    pthread_join(r->thread, NULL);
    while (r->conns) { /* Python normally takes every connection back first */
        struct fr_conn *c = r->conns;
        for (int s = 0; s < 2; s++) {
            close(c->fd[s]);
            if (c->dir[s].pipe_r >= 0) {
                close(c->dir[s].pipe_r);
                close(c->dir[s].pipe_w);
            }
        }
        r->conns = c->next;
        free(c);
    }
    free_zombies(r);
    for (int i = 0; i < r->pooled; i++) {
        close(r->pool[i][0]);
        close(r->pool[i][1]);
    }
    r->pooled = 0;
    close(r->ep);
    close(r->wake);
    pthread_mutex_destroy(&r->lock);
    free(r);
}
