/*
 * rusage: runs a command and writes what it cost to a file, as one tab-separated line:
 *
 *   user_s  sys_s  maxrss_kib  exit_code  self_user_s  self_sys_s
 *
 *   rusage FILE ARGV...
 *
 * user_s/sys_s: CPU of the command and of every descendant it reaped (wait4(2) rusage, as GNU
 * time reports); maxrss_kib: the largest peak resident set among them. self_user_s/self_sys_s:
 * the command's own CPU, all its threads but none of its children: read from
 * /proc/PID/stat (utime, stime; proc(5)) while the command is a zombie, after
 * waitid(WNOWAIT) and before it is reaped. exit_code is 128+N for a command killed by signal N.
 *
 * A small C program rather than a fork from Python: Linux carries the forking process's peak
 * RSS into the child's ru_maxrss across exec, and Python's is larger than a job runner's.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static int self_cpu(pid_t pid, double *user, double *sys)
{
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name (field 2) may hold spaces and parentheses: fields after it are counted
     * from its last ')'. utime and stime are fields 14 and 15. */
    char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    unsigned long long ut = 0, st = 0;
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    double hz = (double)sysconf(_SC_CLK_TCK);
    *user = ut / hz;
    *sys = st / hz;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: rusage FILE ARGV...\n");
        return 2;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("rusage: fork");
        return 2;
    }
    if (pid == 0) {
        execvp(argv[2], argv + 2);
        perror("rusage: exec");
        _exit(127);
    }
    siginfo_t info;
    memset(&info, 0, sizeof info);
    while (waitid(P_PID, pid, &info, WEXITED | WNOWAIT) < 0) {
    }
    double self_user = -1, self_sys = -1;
    self_cpu(pid, &self_user, &self_sys);
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0) {
        perror("rusage: wait4");
        return 2;
    }
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    FILE *out = fopen(argv[1], "w");
    if (!out) {
        perror("rusage: output file");
        return 2;
    }
    fprintf(out, "%.3f\t%.3f\t%ld\t%d\t%.3f\t%.3f\n",
            ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6,
            ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6, ru.ru_maxrss, code, self_user,
            self_sys);
    fclose(out);
    return code;
}
