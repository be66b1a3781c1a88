/*
 * faultday's native relay: the fast path of the fault proxy, with or without
 * the timing toxics (latency, bandwidth).
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
 *
 * Stream toxics: Python decides, per connection, which toxics act on it (their
 * toxicity is rolled there) and hands the relay each direction's parameters
 * (struct fr_params). A timed direction keeps what it read in its pipe, as a
 * bounded ring of chunks with the time each may leave: latency from the moment
 * it was read (never early), bandwidth from when the previous chunk was done.
 * As Toxiproxy 2.12 does: slicer cuts each chunk by halving it until a piece is
 * within average_size + size_variation (the cut moved by up to the variation)
 * and waits `delay` after every piece; limit_data lets `limit` bytes through,
 * then closes the connection once they are written; timeout passes nothing and
 * closes the connection at `close_at` (0: never; the bytes it holds leave when
 * Python hands the connection over again without it). One timerfd per relay
 * thread wakes it for the earliest chunk or close due. Such a connection has an
 * id; when the relay closes it, a note tells Python (and which toxic did it).
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
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define FR_ABI 4
#define PIPE_SIZE (1 << 20)
#define POOL_MAX 128
#define MAX_EVENTS 256
#define SPLICE_FLAGS (SPLICE_F_MOVE | SPLICE_F_NONBLOCK)
#define RING 64 /* chunks a timed direction holds before it stops reading */
#define MAX_NOTES (2 * MAX_EVENTS)
/* A bandwidth-only chunk may leave this much before its slot: the rate holds over
 * time (the next slot starts where this one ends) and a fast limit is not spent
 * on timer wake-ups. Latency is never early. */
#define BW_SLACK_NS 50000
#define FOREVER INT64_MAX /* a chunk the timeout toxic holds: it never falls due here */
#define SLICE_DEPTH 64    /* slicer: pieces waiting to be halved further (a bounded stack) */

enum { UP = 0, DOWN = 1 };
enum { KIND_UNKNOWN = 0, KIND_TCP = 1, KIND_HTTP = 2 };
enum { LIVE = 0, HANDOFF = 1, DEAD = 2, RELEASED = 3 };
enum { NOTE_HTTP = 2, NOTE_CLOSED = 3, NOTE_LIMIT = 4, NOTE_TIMEOUT = 5 };
enum { C_CLOSED = 4 }; /* counters[4]: connections closed here */

struct fr_conn;

struct fr_end { /* epoll data of one socket */
    struct fr_conn *conn;
    int side; /* 0 = client, 1 = upstream */
};

/* One direction's stream toxics; mirrored by a ctypes Structure in native.py. */
struct fr_params {
    int64_t latency_ns;
    int64_t jitter_ns;      /* uniform in [-jitter, +jitter] per chunk */
    int64_t rate;           /* bytes per second; 0 = no bandwidth toxic */
    int64_t slice_avg;      /* slicer's average_size; 0 = no slicer */
    int64_t slice_var;      /* slicer's size_variation */
    int64_t slice_delay_ns; /* slicer: wait after each piece */
    int64_t limit;          /* limit_data: bytes it still lets through; -1 = none */
    int64_t close_at;       /* timeout: CLOCK_MONOTONIC ns it closes at; 0 = never */
    int32_t on;             /* 0: untimed (plain splice relay) */
    int32_t lat_first;      /* the latency toxic comes before the bandwidth one */
    int32_t hold;           /* timeout: nothing leaves */
    int32_t pad;
};

struct fr_slicer { /* the head chunk's pieces, cut lazily: a depth-first halving */
    int64_t stack[SLICE_DEPTH][2];
    int depth;
    int64_t left;      /* bytes of the current piece not yet written */
    int64_t next;      /* when the next piece may leave (delay after the last) */
    int started;       /* the head chunk's halving has begun */
};

struct fr_chunk {
    int64_t n;   /* bytes of it still in the pipe */
    int64_t due; /* CLOCK_MONOTONIC ns when it may leave */
};

struct fr_dir {
    int src, dst;
    struct fr_params tox;
    struct fr_chunk *ring; /* RING entries, only when tox.on */
    int head, count;
    int64_t bw_end;   /* when the bandwidth toxic is done with what it was given */
    int64_t last_due; /* chunks leave in order */
    int stalled;      /* the pipe was full: read again once something left */
    int wblocked;     /* dst would block: wait for EPOLLOUT, not the timer */
    int pipe_r, pipe_w;
    int64_t in_pipe; /* bytes taken from src, not yet written to dst */
    int eof;         /* src ended */
    int done;        /* everything passed on and dst half-closed */
    struct fr_slicer *slicer; /* only when tox.slice_avg > 0 */
    int64_t limited;          /* bytes limit_data let through (written) in this adoption */
    int limit_hit;            /* limit_data reached: close once the pipe is empty */
};

struct fr_conn {
    int owner;
    int64_t id; /* Python's id for a connection it tracks (toxics); 0 = none */
    struct fr_conn *prev, *next; /* the connections this relay holds */
    struct fr_conn *tprev, *tnext; /* ... of which timed (a direction has toxics) */
    int timed;
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
    int64_t id;
};

/* What fr_release hands back; mirrored by a ctypes Structure in native.py. */
struct fr_state {
    int32_t fd[2];
    int32_t pipe_r[2];
    int32_t pipe_w[2];
    int64_t in_pipe[2];
    int64_t limited[2];
    int32_t eof[2];
    int32_t done[2];
    int32_t kind;
    int32_t owner;
    int64_t id;
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
    struct fr_conn *timed; /* connections with a timed direction */
    int tfd;               /* timerfd: the earliest timed chunk due */
    struct fr_end timer_end;
    int64_t armed; /* when tfd fires; 0 = disarmed */
    uint64_t rng;  /* xorshift state for jitter */
    struct fr_note notes[MAX_NOTES];
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

/* ---- time ------------------------------------------------------------------------- */
static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t rnd(struct fr_relay *r) {
    /* xorshift64 is plenty for a fault injector */
    r->rng ^= r->rng << 13;
    r->rng ^= r->rng >> 7;
    r->rng ^= r->rng << 17;
    return r->rng;
}

static int64_t jitter(struct fr_relay *r, int64_t span) {
    /* Uniform in [-span, span]. */
    return (int64_t)(rnd(r) % (uint64_t)(2 * span + 1)) - span;
}

static void arm(struct fr_relay *r, int64_t when) {
    /* when = 0 disarms; a failed settime leaves the old deadline, which only wakes early */
    if (when == r->armed)
        return;
    struct itimerspec it = {0};
    it.it_value.tv_sec = when / 1000000000;
    it.it_value.tv_nsec = when % 1000000000;
    if (timerfd_settime(r->tfd, TFD_TIMER_ABSTIME, &it, NULL) == 0)
        r->armed = when;
}

/* ---- one connection --------------------------------------------------------------- */
static void note(struct fr_relay *r, struct fr_conn *c, uint32_t kind) {
    /* Full: dropped. A lost HTTP note is found on the next one; a lost close note
     * when Python next takes the proxy's connections (those missing are gone). */
    if (r->nnotes < MAX_NOTES) {
        r->notes[r->nnotes].kind = kind;
        r->notes[r->nnotes].owner = c->owner;
        r->notes[r->nnotes].id = c->id;
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

static void timed_link(struct fr_relay *r, struct fr_conn *c) {
    c->timed = 1;
    c->tprev = NULL;
    c->tnext = r->timed;
    if (r->timed)
        r->timed->tprev = c;
    r->timed = c;
}

static void timed_unlink(struct fr_relay *r, struct fr_conn *c) {
    if (!c->timed)
        return;
    if (c->tprev)
        c->tprev->tnext = c->tnext;
    else
        r->timed = c->tnext;
    if (c->tnext)
        c->tnext->tprev = c->tprev;
    c->tprev = c->tnext = NULL;
    c->timed = 0;
}

static void unlink_conn(struct fr_relay *r, struct fr_conn *c, int state) {
    /* Off the lists; freed once the thread's current batch (which may name it) is done. */
    if (c->prev)
        c->prev->next = c->next;
    else
        r->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    timed_unlink(r, c);
    c->state = state;
    c->next_zombie = r->zombies;
    r->zombies = c;
}

static void close_conn_why(struct fr_relay *r, struct fr_conn *c, uint32_t why) {
    unregister(r, c);
    for (int s = 0; s < 2; s++) {
        close(c->fd[s]);
        c->fd[s] = -1;
        pipe_put(r, &c->dir[s]);
    }
    c->counters[C_CLOSED] += 1;
    if (c->id)
        note(r, c, why);
    unlink_conn(r, c, DEAD);
}

static void close_conn(struct fr_relay *r, struct fr_conn *c) { close_conn_why(r, c, NOTE_CLOSED); }

static int may_read(const struct fr_dir *d) {
    if (d->eof || d->limit_hit)
        return 0;
    if (d->tox.on) /* dst full: what waits in the socket would only make smaller chunks */
        return d->count < RING && !d->stalled && !d->wblocked;
    return d->in_pipe == 0;
}

static int must_write(const struct fr_dir *d) {
    /* A timed direction waits for its timer, not for EPOLLOUT, unless dst is full. */
    return d->tox.on ? d->wblocked : d->in_pipe > 0;
}

static uint32_t interest_of(const struct fr_conn *c, int s) {
    uint32_t want = 0;
    if (may_read(&c->dir[s])) /* this socket is its source */
        want |= EPOLLIN;
    if (must_write(&c->dir[1 - s])) /* this socket is its destination */
        want |= EPOLLOUT;
    return want;
}

static void update_interest(struct fr_relay *r, struct fr_conn *c, uint32_t hup_seen) {
    for (int s = 0; s < 2; s++) {
        uint32_t want = interest_of(c, s);
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
            if (epoll_ctl(r->ep, EPOLL_CTL_MOD, c->fd[s], &ev) < 0) {
                close_conn(r, c); /* cannot watch it any more: it would hang */
                return;
            }
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

/* Queue `n` bytes just read (at `now`) as one chunk, with the time it may leave. */
static void push_chunk(struct fr_relay *r, struct fr_dir *dir, int64_t n, int64_t now) {
    const struct fr_params *p = &dir->tox;
    int64_t lat = p->latency_ns + (p->jitter_ns > 0 ? jitter(r, p->jitter_ns) : 0);
    int64_t lat_due = now + (lat > 0 ? lat : 0);
    int64_t due = lat_due;
    if (p->rate > 0) {
        /* As Python's chain: latency counts from the read; bandwidth from when the
         * chunk reaches it and the previous one is through. */
        int64_t start = p->lat_first ? lat_due : now;
        if (dir->bw_end > start)
            start = dir->bw_end;
        dir->bw_end = start + (int64_t)((double)n * 1e9 / (double)p->rate);
        if (dir->bw_end - BW_SLACK_NS > due)
            due = dir->bw_end - BW_SLACK_NS;
    }
    if (p->hold)
        due = FOREVER;
    if (due < dir->last_due)
        due = dir->last_due;
    dir->last_due = due;
    int tail = (dir->head + dir->count) % RING;
    dir->ring[tail].n = n;
    dir->ring[tail].due = due;
    dir->count++;
}

/* slicer: the next piece of the head chunk (`n` bytes, cut `len` long at first).
 * Toxiproxy's SlicerToxic.chunk, depth-first and one piece at a time: a span
 * longer than average + variation is halved, the cut moved by [-var, var). */
static int64_t next_piece(struct fr_relay *r, struct fr_dir *dir, int64_t len) {
    struct fr_slicer *sl = dir->slicer;
    const struct fr_params *p = &dir->tox;
    if (!sl->started) {
        sl->started = 1;
        sl->depth = 1;
        sl->stack[0][0] = 0;
        sl->stack[0][1] = len;
    }
    if (sl->depth == 0) /* every piece was cut: cannot happen while the chunk has bytes */
        return len;
    sl->depth--;
    int64_t s = sl->stack[sl->depth][0], e = sl->stack[sl->depth][1];
    while (e - s - p->slice_avg > p->slice_var && e - s > 1 && sl->depth < SLICE_DEPTH) {
        int64_t mid = s + (e - s) / 2;
        if (p->slice_var > 0)
            mid += (int64_t)(rnd(r) % (uint64_t)(2 * p->slice_var)) - p->slice_var;
        if (mid <= s)
            mid = s + 1; /* Toxiproxy would cut an empty or negative piece (and panic) */
        if (mid >= e)
            mid = e - 1;
        sl->stack[sl->depth][0] = mid;
        sl->stack[sl->depth][1] = e;
        sl->depth++;
        e = mid;
    }
    return e - s;
}

/* When the head chunk (or its next piece) may leave; FOREVER: held. */
static int64_t head_due(const struct fr_dir *dir) {
    int64_t due = dir->ring[dir->head].due;
    if (dir->slicer && dir->slicer->left == 0 && dir->slicer->next > due && due != FOREVER)
        due = dir->slicer->next;
    return due;
}

/* limit_data: everything it let through has been written; close as Toxiproxy does.
 * Closing a socket with unread input sends a reset that throws away what is still
 * queued to go out (the last bytes allowed): what waits to be read is dropped first,
 * as Toxiproxy's reader would have taken it, so the close is a FIN after the data. */
static void limit_reached(struct fr_relay *r, struct fr_conn *c, int d) {
    shutdown(c->dir[d].dst, SHUT_WR);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 16; i++) /* bounded: a peer may keep sending */
            if (recv(c->fd[s], NULL, 1 << 30, MSG_DONTWAIT | MSG_TRUNC) <= 0)
                break;
    close_conn_why(r, c, NOTE_LIMIT);
}

/* How many due bytes to pass in one splice; 0 = nothing is due. Without a slicer every
 * due chunk goes at once; with one, a single piece (each piece is its own write). */
static int64_t due_now(struct fr_relay *r, struct fr_dir *dir, int64_t now) {
    if (dir->slicer) {
        struct fr_slicer *sl = dir->slicer;
        if (sl->left == 0) {
            if (head_due(dir) > now)
                return 0;
            sl->left = next_piece(r, dir, dir->ring[dir->head].n);
        }
        return sl->left;
    }
    int64_t due_bytes = 0;
    for (int i = 0; i < dir->count; i++) {
        const struct fr_chunk *ch = &dir->ring[(dir->head + i) % RING];
        if (ch->due > now)
            break;
        due_bytes += ch->n;
    }
    return due_bytes;
}

/* The chunks that left (the last one maybe in part); a slicer's piece, done or not. */
static void consume(struct fr_dir *dir, int64_t m, int64_t now) {
    if (dir->slicer) {
        struct fr_slicer *sl = dir->slicer;
        sl->left -= m;
        if (sl->left == 0)
            sl->next = now + dir->tox.slice_delay_ns;
    }
    while (m > 0) {
        struct fr_chunk *ch = &dir->ring[dir->head];
        int64_t took = ch->n < m ? ch->n : m;
        ch->n -= took;
        m -= took;
        if (ch->n == 0) {
            dir->head = (dir->head + 1) % RING;
            dir->count--;
            if (dir->slicer)
                dir->slicer->started = 0; /* the next chunk is halved afresh */
        }
    }
}

/* Pass on what is due at `now`: every due chunk in one splice, or the slicer's pieces. */
static void flush_timed(struct fr_relay *r, struct fr_conn *c, int d, int64_t now) {
    struct fr_dir *dir = &c->dir[d];
    while (dir->count > 0) {
        int64_t want = due_now(r, dir, now);
        if (want == 0)
            break;
        ssize_t m = splice(dir->pipe_r, NULL, dir->dst, NULL, (size_t)want, SPLICE_FLAGS);
        if (m < 0) {
            if (errno == EAGAIN) {
                dir->wblocked = 1;
                return;
            }
            if (errno == EINTR)
                continue;
            close_conn(r, c);
            return;
        }
        if (m == 0) { /* cannot happen with data in the pipe; never spin on it */
            close_conn(r, c);
            return;
        }
        dir->wblocked = 0;
        dir->stalled = 0; /* the pipe has room again */
        dir->in_pipe -= m;
        c->counters[2 * d + 1] += (uint64_t)m;
        if (dir->tox.limit >= 0)
            dir->limited += m;
        if (dir->slicer && dir->tox.slice_delay_ns > 0 && m == want)
            now = now_ns(); /* the delay runs from when the piece left */
        consume(dir, m, now);
    }
    dir->wblocked = 0;
    if (dir->count > 0)
        return;
    if (dir->limit_hit)
        limit_reached(r, c, d);
    else if (dir->eof && !dir->done)
        finish(r, c, d);
}

static void pump(struct fr_relay *r, struct fr_conn *c, int d) {
    struct fr_dir *dir = &c->dir[d];
    if (!may_read(dir))
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
    size_t want = PIPE_SIZE;
    if (dir->tox.on && dir->tox.rate > 0 && dir->tox.rate / 10 < (int64_t)want)
        want = dir->tox.rate >= 10 ? (size_t)(dir->tox.rate / 10) : 1; /* 100 ms a piece */
    if (dir->tox.on && dir->tox.limit >= 0) {
        /* limit_data: read no more than it lets through. Its first data (or EOF) after
         * the limit is reached closes the connection, as Toxiproxy's does. */
        int64_t room = dir->tox.limit - dir->limited - dir->in_pipe;
        if (room <= 0) {
            dir->limit_hit = 1;
            if (dir->count == 0)
                limit_reached(r, c, d);
            return;
        }
        if ((int64_t)want > room)
            want = (size_t)room;
    }
    ssize_t n = splice(dir->src, NULL, dir->pipe_w, NULL, want, SPLICE_FLAGS);
    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) {
            /* Readable, yet nothing moved: the pipe is full. Wait for a chunk to leave. */
            if (errno == EAGAIN && dir->in_pipe > 0)
                dir->stalled = 1;
            return;
        }
        close_conn(r, c);
        return;
    }
    if (n == 0) {
        dir->eof = 1;
        if (dir->in_pipe == 0)
            finish(r, c, d);
        return;
    }
    c->counters[2 * d] += (uint64_t)n;
    if (dir->tox.on) {
        dir->in_pipe += n;
        if (dir->tox.limit >= 0)
            dir->limit_hit = dir->limited + dir->in_pipe >= dir->tox.limit;
        int64_t now = now_ns();
        push_chunk(r, dir, n, now);
        flush_timed(r, c, d, now);
        return;
    }
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
    if (events & EPOLLOUT) {
        int d = 1 - side;
        if (c->dir[d].tox.on)
            flush_timed(r, c, d, now_ns());
        else
            flush(r, c, d);
    }
    if (c->state == LIVE && (events & (EPOLLIN | EPOLLHUP | EPOLLRDHUP)))
        pump(r, c, side);
    if (c->state == LIVE)
        update_interest(r, c, (events & EPOLLHUP) ? (1u << side) : 0);
}

/* The timeout toxic's close: the earlier of the two directions'; 0 = none. */
static int64_t closes_at(const struct fr_conn *c) {
    int64_t a = c->dir[UP].tox.on ? c->dir[UP].tox.close_at : 0;
    int64_t b = c->dir[DOWN].tox.on ? c->dir[DOWN].tox.close_at : 0;
    if (a == 0 || (b != 0 && b < a))
        return b;
    return a;
}

/* Pass on what is due on every timed connection; arm the timer for what is next. */
static void run_timed(struct fr_relay *r) {
    int64_t now = now_ns();
    int64_t next = 0;
    struct fr_conn *c = r->timed;
    while (c) {
        struct fr_conn *tnext = c->tnext; /* c may close (and leave the list) here */
        int64_t close_at = closes_at(c);
        if (close_at && close_at <= now) {
            close_conn_why(r, c, NOTE_TIMEOUT);
            c = tnext;
            continue;
        }
        if (close_at && (next == 0 || close_at < next))
            next = close_at;
        for (int d = 0; d < 2 && c->state == LIVE; d++) {
            struct fr_dir *dir = &c->dir[d];
            if (dir->tox.on && dir->count > 0 && !dir->wblocked)
                flush_timed(r, c, d, now);
        }
        if (c->state == LIVE)
            update_interest(r, c, 0);
        for (int d = 0; d < 2 && c->state == LIVE; d++) {
            struct fr_dir *dir = &c->dir[d];
            if (dir->tox.on && dir->count > 0 && !dir->wblocked) {
                int64_t due = head_due(dir);
                if (due != FOREVER && (next == 0 || due < next))
                    next = due;
            }
        }
        c = tnext;
    }
    arm(r, next);
}

static void free_conn(struct fr_conn *c) {
    for (int d = 0; d < 2; d++) {
        free(c->dir[d].ring);
        free(c->dir[d].slicer);
    }
    free(c);
}

static void free_zombies(struct fr_relay *r) {
    while (r->zombies) {
        struct fr_conn *z = r->zombies;
        r->zombies = z->next_zombie;
        free_conn(z);
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
    /* Timed chunks leave on time: no 50 µs timer slack on this thread. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
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
            if (e == &r->timer_end) {
                uint64_t expirations;
                if (read(r->tfd, &expirations, sizeof expirations) < 0) {
                    /* EAGAIN: already read; the deadline is recomputed below anyway */
                }
                r->armed = 0; /* fired: any deadline set below is a new one */
                continue;
            }
            if (e->conn->state == LIVE)
                handle(r, e->conn, e->side, ev[i].events);
        }
        if (r->timed || r->armed)
            run_timed(r);
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
    r->ep = r->wake = r->tfd = -1;
    r->notify = notify_fd;
    r->rng = (uint64_t)now_ns() | 1;
    r->ep = epoll_create1(EPOLL_CLOEXEC);
    r->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    r->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (r->ep < 0 || r->wake < 0 || r->tfd < 0)
        goto fail;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(r->ep, EPOLL_CTL_ADD, r->wake, &ev) < 0)
        goto fail;
    struct epoll_event tev = {.events = EPOLLIN, .data.ptr = &r->timer_end};
    if (epoll_ctl(r->ep, EPOLL_CTL_ADD, r->tfd, &tev) < 0)
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
    if (r->tfd >= 0)
        close(r->tfd);
    free(r);
    return NULL;
}

static int set_timing(struct fr_conn *c, const struct fr_params *params) {
    for (int d = 0; d < 2; d++) {
        if (!params || !params[d].on)
            continue;
        c->dir[d].tox = params[d];
        c->dir[d].ring = calloc(RING, sizeof(struct fr_chunk));
        if (!c->dir[d].ring)
            return -1;
        if (params[d].slice_avg > 0) {
            c->dir[d].slicer = calloc(1, sizeof(struct fr_slicer));
            if (!c->dir[d].slicer)
                return -1;
        }
    }
    return 0;
}

/* Take over a connected, non-blocking socket pair of proxy `owner`: 0, or -1 (errno).
 * `id`: Python's id for it (0 = untracked); `params`: two directions' timing toxics
 * or NULL; `st`: pipes (and bytes in them) it had in Python, or NULL. Bytes already
 * in a timed direction's pipe count as read now. On failure nothing is taken. */
int fr_adopt(struct fr_relay *r, int client, int upstream, uint64_t *counters, int owner,
             int64_t id, const struct fr_params *params, const struct fr_state *st) {
    struct fr_conn *c = calloc(1, sizeof *c);
    if (!c)
        return -1;
    c->owner = owner;
    c->id = id;
    c->fd[0] = client;
    c->fd[1] = upstream;
    c->counters = counters;
    c->kind = st ? st->kind : KIND_UNKNOWN;
    c->state = LIVE;
    for (int s = 0; s < 2; s++) {
        c->end[s].conn = c;
        c->end[s].side = s;
        c->dir[s].src = c->fd[s];
        c->dir[s].dst = c->fd[1 - s];
        c->dir[s].pipe_r = st ? st->pipe_r[s] : -1;
        c->dir[s].pipe_w = st ? st->pipe_w[s] : -1;
        c->dir[s].in_pipe = st ? st->in_pipe[s] : 0;
    }
    if (set_timing(c, params) < 0) {
        free_conn(c);
        errno = ENOMEM;
        return -1;
    }
    pthread_mutex_lock(&r->lock);
    int64_t now = now_ns();
    for (int d = 0; d < 2; d++) {
        struct fr_dir *dir = &c->dir[d];
        if (dir->tox.on && dir->in_pipe > 0)
            push_chunk(r, dir, dir->in_pipe, now);
        /* Python keeps a pipe holding more than limit_data allows (it counts exactly). */
        if (dir->tox.on && dir->tox.limit >= 0 && dir->in_pipe > 0)
            dir->limit_hit = dir->in_pipe >= dir->tox.limit;
    }
    for (int s = 0; s < 2; s++) {
        uint32_t want = interest_of(c, s);
        struct epoll_event ev = {.events = want, .data.ptr = &c->end[s]};
        if (epoll_ctl(r->ep, EPOLL_CTL_ADD, c->fd[s], &ev) < 0) {
            int err = errno;
            unregister(r, c);
            pthread_mutex_unlock(&r->lock);
            free_conn(c);
            errno = err;
            return -1;
        }
        c->registered[s] = 1;
        c->interest[s] = want;
    }
    c->next = r->conns;
    if (r->conns)
        r->conns->prev = c;
    r->conns = c;
    if (c->dir[UP].tox.on || c->dir[DOWN].tox.on)
        timed_link(r, c);
    for (int d = 0; d < 2; d++)
        if (c->dir[d].tox.on && c->dir[d].count > 0) {
            int64_t due = head_due(&c->dir[d]);
            if (due != FOREVER && (r->armed == 0 || due < r->armed))
                arm(r, due);
        }
    int64_t close_at = closes_at(c);
    if (close_at && (r->armed == 0 || close_at < r->armed))
        arm(r, close_at);
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
        st->limited[s] = c->dir[s].limited;
        st->eof[s] = c->dir[s].eof;
        st->done[s] = c->dir[s].done;
    }
    st->kind = c->state == HANDOFF ? KIND_HTTP : c->kind;
    st->owner = c->owner;
    st->id = c->id;
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
        free_conn(c);
    }
    free_zombies(r);
    for (int i = 0; i < r->pooled; i++) {
        close(r->pool[i][0]);
        close(r->pool[i][1]);
    }
    r->pooled = 0;
    close(r->ep);
    close(r->wake);
    close(r->tfd);
    pthread_mutex_destroy(&r->lock);
    free(r);
}
