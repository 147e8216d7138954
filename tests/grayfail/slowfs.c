/* slowfs: a FUSE pass-through file system that makes a disk slow or hang on command (issue 32).
 *
 *   slowfs BACKING_DIR MOUNTPOINT CONTROL_FILE [fuse options, e.g. -f]
 *
 * Every operation is passed to BACKING_DIR. CONTROL_FILE (outside the mount) holds one line:
 *   "ok"            no fault
 *   "delay MS"      every write, fsync and create waits MS milliseconds first
 *   "hang"          every write, fsync and create waits until the line says otherwise
 *   "fsync-eio"     every fsync, fdatasync and directory fsync fails with EIO; writes pass (the
 *                   error a dying disk or a thin-provisioned volume gives: issue 58)
 *   "fsync-hang"    every fsync waits until the line says otherwise; writes pass
 *   "write-eio"     every write fails with EIO
 *   "write-enospc"  every write fails with ENOSPC
 * A thread re-reads it every 20 ms and writes each line it applied to CONTROL_FILE.applied (the
 * tests wait for that instead of guessing how long the thread takes). Reads are never delayed: a hung disk that still serves the
 * page cache is what makes a process look alive while it cannot make anything durable.
 * Written for these tests (no code taken from elsewhere); build with scripts in tests/grayfail.
 */
#define FUSE_USE_VERSION 31
#define _GNU_SOURCE
#include <fuse.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static const char *backing;
static const char *control;
static atomic_int mode;        /* 0 ok, 1 delay, 2 hang, 3 fsync-eio, 4 fsync-hang, 5 write-eio, 6 write-enospc */
static atomic_int delay_ms;

static void full(char *out, const char *path) {
    snprintf(out, PATH_MAX, "%s%s", backing, path);
}

static void *watch_control(void *arg) {
    (void)arg;
    char line[64], applied[64] = "", ack[PATH_MAX];
    snprintf(ack, sizeof ack, "%s.applied", control);
    for (;;) {
        FILE *f = fopen(control, "r");
        if (f != NULL) {
            if (fgets(line, sizeof line, f) != NULL) {
                if (strncmp(line, "hang", 4) == 0) {
                    atomic_store(&mode, 2);
                } else if (strncmp(line, "fsync-eio", 9) == 0) {
                    atomic_store(&mode, 3);
                } else if (strncmp(line, "fsync-hang", 10) == 0) {
                    atomic_store(&mode, 4);
                } else if (strncmp(line, "write-eio", 9) == 0) {
                    atomic_store(&mode, 5);
                } else if (strncmp(line, "write-enospc", 12) == 0) {
                    atomic_store(&mode, 6);
                } else if (strncmp(line, "delay ", 6) == 0) {
                    atomic_store(&delay_ms, atoi(line + 6));
                    atomic_store(&mode, 1);
                } else {
                    atomic_store(&mode, 0);
                }
                if (strcmp(line, applied) != 0) {
                    FILE *a = fopen(ack, "w");
                    if (a != NULL) {
                        fputs(line, a);
                        fclose(a);
                        snprintf(applied, sizeof applied, "%s", line);
                    }
                }
            }
            fclose(f);
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* the fault: called before every write-side operation */
static void fault(void) {
    int m = atomic_load(&mode);
    if (m == 1) {
        int ms = atomic_load(&delay_ms);
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    while (atomic_load(&mode) == 2) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* the fsync fault: an errno to return instead of syncing (0: sync) */
static int fsync_fault(void) {
    fault();
    while (atomic_load(&mode) == 4) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return atomic_load(&mode) == 3 ? EIO : 0;
}

/* the write fault: an errno to return instead of writing (0: write) */
static int write_fault(void) {
    fault();
    int m = atomic_load(&mode);
    return m == 5 ? EIO : m == 6 ? ENOSPC : 0;
}

static int sf_getattr(const char *path, struct stat *st, struct fuse_file_info *fi) {
    int r;
    if (fi != NULL) {
        r = fstat((int)fi->fh, st);
    } else {
        char p[PATH_MAX];
        full(p, path);
        r = lstat(p, st);
    }
    return r == -1 ? -errno : 0;
}

static int sf_access(const char *path, int mask) {
    char p[PATH_MAX];
    full(p, path);
    return access(p, mask) == -1 ? -errno : 0;
}

static int sf_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off, struct fuse_file_info *fi,
                      enum fuse_readdir_flags flags) {
    (void)off; (void)fi; (void)flags;
    char p[PATH_MAX];
    full(p, path);
    DIR *d = opendir(p);
    if (d == NULL)
        return -errno;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        memset(&st, 0, sizeof st);
        st.st_ino = e->d_ino;
        st.st_mode = (mode_t)e->d_type << 12;
        if (fill(buf, e->d_name, &st, 0, 0))
            break;
    }
    closedir(d);
    return 0;
}

static int sf_mkdir(const char *path, mode_t m) {
    char p[PATH_MAX];
    full(p, path);
    fault();
    return mkdir(p, m) == -1 ? -errno : 0;
}

static int sf_rmdir(const char *path) {
    char p[PATH_MAX];
    full(p, path);
    return rmdir(p) == -1 ? -errno : 0;
}

static int sf_unlink(const char *path) {
    char p[PATH_MAX];
    full(p, path);
    return unlink(p) == -1 ? -errno : 0;
}

static int sf_rename(const char *from, const char *to, unsigned int flags) {
    char a[PATH_MAX], b[PATH_MAX];
    if (flags)
        return -EINVAL;
    full(a, from);
    full(b, to);
    fault();
    return rename(a, b) == -1 ? -errno : 0;
}

static int sf_truncate(const char *path, off_t size, struct fuse_file_info *fi) {
    int r;
    fault();
    if (fi != NULL) {
        r = ftruncate((int)fi->fh, size);
    } else {
        char p[PATH_MAX];
        full(p, path);
        r = truncate(p, size);
    }
    return r == -1 ? -errno : 0;
}

static int sf_chmod(const char *path, mode_t m, struct fuse_file_info *fi) {
    (void)fi;
    char p[PATH_MAX];
    full(p, path);
    return chmod(p, m) == -1 ? -errno : 0;
}

static int sf_utimens(const char *path, const struct timespec tv[2], struct fuse_file_info *fi) {
    (void)fi;
    char p[PATH_MAX];
    full(p, path);
    return utimensat(AT_FDCWD, p, tv, AT_SYMLINK_NOFOLLOW) == -1 ? -errno : 0;
}

static int sf_create(const char *path, mode_t m, struct fuse_file_info *fi) {
    char p[PATH_MAX];
    full(p, path);
    fault();
    int fd = open(p, fi->flags, m);
    if (fd == -1)
        return -errno;
    fi->fh = (uint64_t)fd;
    return 0;
}

static int sf_open(const char *path, struct fuse_file_info *fi) {
    char p[PATH_MAX];
    full(p, path);
    int fd = open(p, fi->flags);
    if (fd == -1)
        return -errno;
    fi->fh = (uint64_t)fd;
    return 0;
}

static int sf_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)path;
    ssize_t n = pread((int)fi->fh, buf, size, off);
    return n == -1 ? -errno : (int)n;
}

static int sf_write(const char *path, const char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)path;
    int e = write_fault();
    if (e)
        return -e;
    ssize_t n = pwrite((int)fi->fh, buf, size, off);
    return n == -1 ? -errno : (int)n;
}

static int sf_statfs(const char *path, struct statvfs *st) {
    char p[PATH_MAX];
    full(p, path);
    return statvfs(p, st) == -1 ? -errno : 0;
}

static int sf_release(const char *path, struct fuse_file_info *fi) {
    (void)path;
    close((int)fi->fh);
    return 0;
}

static int sf_fsync(const char *path, int datasync, struct fuse_file_info *fi) {
    (void)path;
    int e = fsync_fault();
    if (e)
        return -e;
    int r = datasync ? fdatasync((int)fi->fh) : fsync((int)fi->fh);
    return r == -1 ? -errno : 0;
}

static int sf_fsyncdir(const char *path, int datasync, struct fuse_file_info *fi) {
    (void)datasync; (void)fi;
    char p[PATH_MAX];
    full(p, path);
    int e = fsync_fault();
    if (e)
        return -e;
    int fd = open(p, O_RDONLY | O_DIRECTORY);
    if (fd == -1)
        return -errno;
    int r = fsync(fd);
    close(fd);
    return r == -1 ? -errno : 0;
}

static int sf_fallocate(const char *path, int m, off_t off, off_t len, struct fuse_file_info *fi) {
    (void)path;
    fault();
    return fallocate((int)fi->fh, m, off, len) == -1 ? -errno : 0;
}

static void *sf_init(struct fuse_conn_info *conn, struct fuse_config *cfg) {
    (void)conn;
    cfg->use_ino = 1;
    cfg->entry_timeout = 0;
    cfg->attr_timeout = 0;
    cfg->negative_timeout = 0;
    return NULL;
}

static const struct fuse_operations ops = {
    .init = sf_init,
    .getattr = sf_getattr,
    .access = sf_access,
    .readdir = sf_readdir,
    .mkdir = sf_mkdir,
    .rmdir = sf_rmdir,
    .unlink = sf_unlink,
    .rename = sf_rename,
    .truncate = sf_truncate,
    .chmod = sf_chmod,
    .utimens = sf_utimens,
    .create = sf_create,
    .open = sf_open,
    .read = sf_read,
    .write = sf_write,
    .statfs = sf_statfs,
    .release = sf_release,
    .fsync = sf_fsync,
    .fsyncdir = sf_fsyncdir,
    .fallocate = sf_fallocate,
};

int main(int argc, char *argv[]) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s BACKING_DIR MOUNTPOINT CONTROL_FILE [fuse options]\n", argv[0]);
        return 2;
    }
    static char real[PATH_MAX];
    if (realpath(argv[1], real) == NULL) {
        perror(argv[1]);
        return 2;
    }
    backing = real;
    control = argv[3];
    pthread_t t;
    pthread_create(&t, NULL, watch_control, NULL);
    /* fuse_main sees: prog MOUNTPOINT [options] */
    char *fargv[64];
    int fargc = 0;
    fargv[fargc++] = argv[0];
    fargv[fargc++] = argv[2];
    for (int i = 4; i < argc && fargc < 63; i++)
        fargv[fargc++] = argv[i];
    return fuse_main(fargc, fargv, &ops, NULL);
}
