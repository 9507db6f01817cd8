/*
 * submit-client: the floor of a `lanes submit` round trip. It does what a `lanes submit KEY --
 * COMMAND` does on the socket, and nothing else: connect, send one submit request (protocol
 * version 1, see the README), read the answer's line, print it, exit.
 *
 *   submit-client SOCKET KEY COMMAND
 *
 * KEY and COMMAND are put in the JSON request as they are: give plain words.
 */
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: submit-client SOCKET KEY COMMAND\n");
        return 2;
    }
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    if (strlen(argv[1]) >= sizeof address.sun_path) {
        fprintf(stderr, "submit-client: socket path too long\n");
        return 2;
    }
    strcpy(address.sun_path, argv[1]);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&address, sizeof address) != 0) {
        perror("submit-client: connect");
        return 2;
    }
    char request[4096];
    int length = snprintf(request, sizeof request,
                          "{\"v\":1,\"op\":\"submit\",\"key\":\"%s\",\"command\":\"%s\"}\n",
                          argv[2], argv[3]);
    if (length <= 0 || (size_t)length >= sizeof request || write(fd, request, length) != length) {
        perror("submit-client: write");
        return 2;
    }
    char answer[8192];
    size_t got = 0;
    while (got < sizeof answer) {
        ssize_t n = read(fd, answer + got, sizeof answer - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        if (memchr(answer, '\n', got))
            break;
    }
    close(fd);
    if (got == 0 || !memchr(answer, '\n', got)) {
        fprintf(stderr, "submit-client: no answer\n");
        return 2;
    }
    fwrite(answer, 1, got, stdout);
    return 0;
}
