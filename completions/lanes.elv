
use builtin;
use str;

set edit:completion:arg-completer[lanes] = {|@words|
    fn spaces {|n|
        builtin:repeat $n ' ' | str:join ''
    }
    fn cand {|text desc|
        edit:complex-candidate $text &display=$text' '(spaces (- 14 (wcswidth $text)))$desc
    }
    var command = 'lanes'
    for word $words[1..-1] {
        if (str:has-prefix $word '-') {
            break
        }
        set command = $command';'$word
    }
    var completions = [
        &'lanes'= {
            cand --socket 'With `lanes serve`: the socket to listen on (default: LANES_SOCKET, else $XDG_RUNTIME_DIR/lanes/lanes.sock, else /tmp/lanes-UID/lanes.sock, in a directory only this user can enter)'
            cand --journal 'With `lanes serve`: the journal of admitted jobs (default: beside the socket, named after it, `lanes.journal`). A server started on a journal an earlier one left re-admits the jobs that have no record yet, in their order'
            cand -a 'Read the input arguments from FILE, one per line (per NUL-terminated record with -0), instead of stdin'
            cand --arg-file 'Read the input arguments from FILE, one per line (per NUL-terminated record with -0), instead of stdin'
            cand --key 'Compute each job''s key from its input record (then a whole record, no tab): `{}` the record, `{1}`, `{2}`... its columns (--colsep), `{/}` basename, `{//}` dirname, `{.}` without extension, `{/.}` basename without extension. Default with a trailing command, `:::` or -a: `{}`, every distinct record its own key'
            cand --colsep 'Split records into the columns `{1}`, `{2}`... at the string SEP (not a regex)'
            cand --manifest 'Read FILE as a TOML manifest whatever its name'
            cand -j 'At most N jobs in flight overall [default: the number of CPUs]'
            cand --max-concurrent 'At most N jobs in flight overall [default: the number of CPUs]'
            cand --timeout 'Per-job turn timeout: seconds (`20`, `0.5`) or units (`250ms`, `10m`). Past it the job''s process group gets SIGTERM, then SIGKILL after the grace period'
            cand --grace 'Grace period between SIGTERM (or the forwarded signal) and SIGKILL [default: 5s]'
            cand --leak-window 'How long to wait, after a job''s shell exits, for the rest of its process group and for EOF on its pipes before the leftovers are terminated and the job marked `leaked`'
            cand --containment 'What holds a job''s processes together: `cgroup` (a cgroup v2 per job: nothing escapes by changing process group or session), `process-group` (each job''s own process group), or `auto` (cgroup where lanes can create one, else process group)'
            cand --shell 'Shell that runs each command as `SHELL -c COMMAND` [default: sh]'
            cand --max-queued 'At most N jobs admitted but not yet started, across all keys [default: 10000]'
            cand --on-full 'What a new job meets when --max-queued jobs wait: `wait` pauses reading input until there is room (backpressure); `reject` records it as rejected (queue_full) unless it starts at once (its key idle, a slot free) [default: wait]'
            cand --coalesce 'Coalesce waiting jobs per key: `latest` keeps at most one running and one pending job per key, a newer job replacing the pending one (recorded as superseded) [default: off]'
            cand --retries 'Re-run a failed job up to N more times, first in its own lane [default: 0]'
            cand --retry-delay 'Pause before each retry; the key''s later jobs wait behind it [default: 0s]'
            cand --lock-dir 'Share key lanes with every lanes process given the same DIR (created when missing): at most one job per key in flight across all of them, first come first served. Also `LANES_LOCK_DIR`. A job holds its key (descriptor 3) for as long as it lives'
            cand --shared-max-concurrent 'With --lock-dir: at most N jobs in flight across every process sharing DIR, on top of each process''s own -j. A job holds its shared slot on descriptor 4'
            cand --coordinate 'Share key lanes with every lanes process on every host given the same PostgreSQL URL (`postgres://USER@HOST:PORT/DB`; also `LANES_COORDINATE`, and the `PG*` environment variables and ~/.pgpass for what the URL leaves out): at most one job per key in flight across the fleet, first come first served. A job holds its key''s database session (descriptor 3) for as long as it lives'
            cand --namespace 'With --coordinate: the fleet''s name in the database, so that several fleets may share one [default: lanes]'
            cand --host-id 'With --coordinate: how this host is named to the others (`lanes locks`, `lock_holder`) [default: the host name]'
            cand --max-queued-weight 'At most W of weight admitted but not yet started, across all keys (each job counts its weight, 1 when it declares none), on top of --max-queued; --on-full applies to both [default: no bound]'
            cand --weight 'Every job''s share of -j unless the manifest gives its own `weight`: a job of weight W starts only when W units of -j are free [default: 1]'
            cand --resource 'A named resource of the run (repeatable; overrides the manifest''s `[resources]` entry of that name): `NAME=N` an amount (`cpu=8`, `mem=32G`: K, M, G, T, P are powers of 1024) or `NAME=ID,ID,…` named units (`gpu=0,1,2,3`; one unit: `port=8001,`)'
            cand --needs 'What every job needs of the run''s resources unless the manifest gives its own `needs`: `NAME=N,…` (`gpu=1,mem=8G`). A job starts only when all of it is free, and holds it until its process group is empty; named units are handed over as `LANES_RESOURCE_<NAME>` and `{res.NAME}`'
            cand --reserve-after 'Once the first waiting key whose job does not fit (its weight or a resource is short) has waited D, what it needs is set aside for it: later keys start only in what is free beyond it, so it is not starved. 0s sets aside at once (strict order between keys) [default: 0s]'
            cand --command 'Treat the text after the tab as an argument and run TEMPLATE for it: `{}` is the argument (a batch''s arguments), `{key}` the key, `{seq}` and `{slot}` numbers; every substitution is shell-quoted. Without `{}`, the argument is appended. `{{`/`}}` are literal braces'
            cand --batch-size 'With --command: merge up to N waiting jobs of one lane into one run; `{}` expands to all their arguments, in lane order [default: 1]'
            cand --batch-bytes 'With --command: at most B bytes of quoted arguments in one batch (a batch always holds at least one job); without --batch-size, batches by bytes alone, as `xargs -s` [default: 100000, under Linux''s 128 KiB limit on one argument; more than that limit, less the template''s own text, is refused]'
            cand --batch-delay 'With --command: a lane whose batch is not full waits until its oldest job has waited D (a debounce for streamed input); a full batch starts at once [default: 0s]'
            cand --resume 'Skip every job that succeeded (or was skipped so) in an earlier report (matched by key, command and occurrence number); each gets a `skipped` record. A torn last line in REPORT is ignored; a file that is not a lanes report is refused. REPORT may be the same file as --report: it is read before the new report is written'
            cand --backend 'Where jobs run: `local` (here, each in a process group of its own) or `slurm` (each under `srun` on a Slurm cluster, one job per key at a time cluster-wide through `--dependency=singleton`)'
            cand --slurm-name-prefix 'Slurm: job names are PREFIX.HASH(key); runs sharing a prefix share their keys'' lanes on the cluster (default: lanes)'
            cand --slurm-license 'Slurm: every job takes one of the cluster license NAME (`--licenses=NAME:1`), a cluster-wide cap'
            cand --slurm-partition 'Slurm: `srun --partition`'
            cand --slurm-account 'Slurm: `srun --account`'
            cand --slurm-qos 'Slurm: `srun --qos`'
            cand --events 'Write JSON Lines lifecycle events (queued with `ahead`, started, ended) to FILE'
            cand --report 'Write the JSON Lines report to FILE'
            cand --output 'How job output is shown'
            cand --color 'Colour the key prefixes: `auto` on a terminal unless NO_COLOR is set or CI is true'
            cand --progress 'The live display on stderr: `auto` when stderr is a terminal, unless NO_COLOR is set, CI is true or --color never'
            cand --junit 'Write JUnit XML to FILE when the run ends: a test suite per key, a test case per job'
            cand --results 'Also write each job''s stdout and stderr to files of their own under DIR (created when missing), named from the seq and the escaped key: `000042-KEY.stdout`. A DIR that holds files is refused, so that two runs never mix, unless --results-clean'
            cand --requeue-lost 'With `lanes serve`: run again the jobs the journal says were running when the earlier server ended without recording them, instead of recording them interrupted, reason `server_lost`'
            cand --no-requeue-lost 'Undo --requeue-lost'
            cand -0 'Records end with a NUL byte instead of a newline (`find -print0`, `xargs -0`), so that arguments and commands may hold newlines'
            cand --null 'Records end with a NUL byte instead of a newline (`find -print0`, `xargs -0`), so that arguments and commands may hold newlines'
            cand --no-null 'Records end with a newline (undoes -0)'
            cand --dry-run 'Print what would run, per key in order, with its round, slot and batch (as if every job took the same time and succeeded), then exit 0: nothing runs, no report is written'
            cand --no-dry-run 'Undo --dry-run'
            cand --cancel-in-progress 'A newer job of a key also interrupts the key''s running job (superseded), then starts. Implies --coalesce latest'
            cand --no-cancel-in-progress 'Undo --cancel-in-progress (and a manifest''s `cancel_in_progress = true`)'
            cand --fail-fast 'After the first failed job, start nothing more and stop the running jobs'
            cand --no-fail-fast 'Undo --fail-fast (and a manifest''s `fail_fast = true`)'
            cand --sticky-slots 'Bind each key to the slot its first job ran in; later jobs of the key wait for that slot (`LANES_SLOT`), for per-slot resources such as a GPU or a port'
            cand --coordinate-records 'With --coordinate: write every job record into the database''s `lanes_records` table as well (the report is unchanged), so that the fleet has one history to query'
            cand --no-coordinate-records 'Undo --coordinate-records'
            cand --no-sticky-slots 'Undo --sticky-slots (and a manifest''s `sticky_slots = true`)'
            cand --strict 'Validate the whole input before anything starts; exit 2 on the first invalid line'
            cand --no-strict 'Undo --strict'
            cand --json 'Write the JSON Lines report to stdout; all job output then goes to stderr'
            cand --no-json 'Undo --json'
            cand --keep-order 'With --output grouped: print the blocks in input order (a block waits for the blocks of earlier jobs)'
            cand --no-keep-order 'Undo --keep-order'
            cand --results-clean 'With --results: first remove the files an earlier run wrote in DIR (anything else there is refused)'
            cand --no-results-clean 'Undo --results-clean'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
            cand locks 'List the keys held in a lock directory (--lock-dir) or a fleet''s database (--coordinate), their holders and their waiters'
            cand submit 'Submit a job to a `lanes serve` (KEY -- COMMAND...), or without KEY one job per stdin line of KEY<TAB>COMMAND. Exit status: 0 started, 1 failed (its process could not start), 10 queued, 11 coalesced, 12 rejected, 13 closed, 2 error; with --wait, the job''s own'
            cand cancel 'Drop a key''s waiting jobs and stop its running job (reason `cancelled`) on a `lanes serve`; returns once that job''s processes are gone'
            cand status 'What a `lanes serve` runs and what waits, its counters and its cap'
            cand set 'Change a `lanes serve`''s cap on running jobs; lowering it stops nothing'
            cand drain 'Make a `lanes serve` admit nothing more, finish what it admitted and end; returns once it has written its report'
            cand close 'Make a `lanes serve` admit nothing more, stop every job (reason `shutdown`) and end; returns once it has written its report'
            cand timeline 'Draw a run from its report (--report): what ran when, in which slot, and why every job waited; as an HTML page, a Chrome trace (JSON, for Perfetto) or Markdown with a Mermaid Gantt chart'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'lanes;locks'= {
            cand --coordinate 'The fleet''s database (also `LANES_COORDINATE`)'
            cand --namespace 'The fleet''s namespace in the database'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'lanes;submit'= {
            cand --socket 'The server''s socket (default: LANES_SOCKET, else $XDG_RUNTIME_DIR/lanes/lanes.sock, else /tmp/lanes-UID/lanes.sock)'
            cand --json 'Print the answers (and with --wait the record) as JSON lines'
            cand --wait 'Wait for the job''s record and exit as the job did (0, its exit status, 128 + the signal, or 1)'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'lanes;cancel'= {
            cand --socket 'The server''s socket'
            cand --json 'Print the answer as JSON'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'lanes;status'= {
            cand --socket 'The server''s socket'
            cand --json 'Print the answer as JSON'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'lanes;set'= {
            cand --socket 'The server''s socket'
            cand -j 'The new cap'
            cand --max-concurrent 'The new cap'
            cand --json 'Print the answer as JSON'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'lanes;drain'= {
            cand --socket 'The server''s socket'
            cand --json 'Print the answer as JSON'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'lanes;close'= {
            cand --socket 'The server''s socket'
            cand --json 'Print the answer as JSON'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'lanes;timeline'= {
            cand --events 'The run''s events file (--events; `-`: stdin): jobs still running or waiting, which have no record yet, are drawn from it'
            cand -o 'Where to write the timeline (`-`: stdout)'
            cand --output 'Where to write the timeline (`-`: stdout)'
            cand --format 'html, json (Chrome Trace Event format) or md (Mermaid); by default from OUT''s extension (.html/.htm, .json, .md)'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'lanes;help'= {
            cand locks 'List the keys held in a lock directory (--lock-dir) or a fleet''s database (--coordinate), their holders and their waiters'
            cand submit 'Submit a job to a `lanes serve` (KEY -- COMMAND...), or without KEY one job per stdin line of KEY<TAB>COMMAND. Exit status: 0 started, 1 failed (its process could not start), 10 queued, 11 coalesced, 12 rejected, 13 closed, 2 error; with --wait, the job''s own'
            cand cancel 'Drop a key''s waiting jobs and stop its running job (reason `cancelled`) on a `lanes serve`; returns once that job''s processes are gone'
            cand status 'What a `lanes serve` runs and what waits, its counters and its cap'
            cand set 'Change a `lanes serve`''s cap on running jobs; lowering it stops nothing'
            cand drain 'Make a `lanes serve` admit nothing more, finish what it admitted and end; returns once it has written its report'
            cand close 'Make a `lanes serve` admit nothing more, stop every job (reason `shutdown`) and end; returns once it has written its report'
            cand timeline 'Draw a run from its report (--report): what ran when, in which slot, and why every job waited; as an HTML page, a Chrome trace (JSON, for Perfetto) or Markdown with a Mermaid Gantt chart'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'lanes;help;locks'= {
        }
        &'lanes;help;submit'= {
        }
        &'lanes;help;cancel'= {
        }
        &'lanes;help;status'= {
        }
        &'lanes;help;set'= {
        }
        &'lanes;help;drain'= {
        }
        &'lanes;help;close'= {
        }
        &'lanes;help;timeline'= {
        }
        &'lanes;help;help'= {
        }
    ]
    $completions[$command]
}
