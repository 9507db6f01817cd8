# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_lanes_global_optspecs
    string join \n socket= journal= requeue-lost no-requeue-lost a/arg-file= 0/null no-null key= dry-run no-dry-run colsep= manifest= j/max-concurrent= timeout= grace= leak-window= containment= shell= max-queued= on-full= coalesce= cancel-in-progress no-cancel-in-progress retries= retry-delay= fail-fast no-fail-fast sticky-slots lock-dir= shared-max-concurrent= coordinate= namespace= coordinate-records no-coordinate-records host-id= no-sticky-slots max-queued-weight= weight= resource= needs= reserve-after= command= batch-size= batch-bytes= batch-delay= resume= backend= slurm-name-prefix= slurm-license= slurm-partition= slurm-account= slurm-qos= events= strict no-strict report= json no-json output= keep-order no-keep-order color= progress= junit= results= results-clean no-results-clean h/help V/version
end

function __fish_lanes_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_lanes_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_lanes_using_subcommand
    set -l cmd (__fish_lanes_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c lanes -n "__fish_lanes_needs_command" -l socket -d 'With `lanes serve`: the socket to listen on (default: LANES_SOCKET, else $XDG_RUNTIME_DIR/lanes/lanes.sock, else /tmp/lanes-UID/lanes.sock, in a directory only this user can enter)' -r -F
complete -c lanes -n "__fish_lanes_needs_command" -l journal -d 'With `lanes serve`: the journal of admitted jobs (default: beside the socket, named after it, `lanes.journal`). A server started on a journal an earlier one left re-admits the jobs that have no record yet, in their order' -r -F
complete -c lanes -n "__fish_lanes_needs_command" -s a -l arg-file -d 'Read the input arguments from FILE, one per line (per NUL-terminated record with -0), instead of stdin' -r -F
complete -c lanes -n "__fish_lanes_needs_command" -l key -d 'Compute each job\'s key from its input record (then a whole record, no tab): `{}` the record, `{1}`, `{2}`... its columns (--colsep), `{/}` basename, `{//}` dirname, `{.}` without extension, `{/.}` basename without extension. Default with a trailing command, `:::` or -a: `{}`, every distinct record its own key' -r
complete -c lanes -n "__fish_lanes_needs_command" -l colsep -d 'Split records into the columns `{1}`, `{2}`... at the string SEP (not a regex)' -r
complete -c lanes -n "__fish_lanes_needs_command" -l manifest -d 'Read FILE as a TOML manifest whatever its name' -r -F
complete -c lanes -n "__fish_lanes_needs_command" -s j -l max-concurrent -d 'At most N jobs in flight overall [default: the number of CPUs]' -r
complete -c lanes -n "__fish_lanes_needs_command" -l timeout -d 'Per-job turn timeout: seconds (`20`, `0.5`) or units (`250ms`, `10m`). Past it the job\'s process group gets SIGTERM, then SIGKILL after the grace period' -r
complete -c lanes -n "__fish_lanes_needs_command" -l grace -d 'Grace period between SIGTERM (or the forwarded signal) and SIGKILL [default: 5s]' -r
complete -c lanes -n "__fish_lanes_needs_command" -l leak-window -d 'How long to wait, after a job\'s shell exits, for the rest of its process group and for EOF on its pipes before the leftovers are terminated and the job marked `leaked`' -r
complete -c lanes -n "__fish_lanes_needs_command" -l containment -d 'What holds a job\'s processes together: `cgroup` (a cgroup v2 per job: nothing escapes by changing process group or session), `process-group` (each job\'s own process group), or `auto` (cgroup where lanes can create one, else process group)' -r -f -a "auto\t'A cgroup per job where lanes can create one, else the job\'s process group'
cgroup\t'A cgroup (v2) per job; an error (exit 2) where lanes cannot create one'
process-group\t'The job\'s own process group'"
complete -c lanes -n "__fish_lanes_needs_command" -l shell -d 'Shell that runs each command as `SHELL -c COMMAND` [default: sh]' -r
complete -c lanes -n "__fish_lanes_needs_command" -l max-queued -d 'At most N jobs admitted but not yet started, across all keys [default: 10000]' -r
complete -c lanes -n "__fish_lanes_needs_command" -l on-full -d 'What a new job meets when --max-queued jobs wait: `wait` pauses reading input until there is room (backpressure); `reject` records it as rejected (queue_full) unless it starts at once (its key idle, a slot free) [default: wait]' -r -f -a "wait\t'Pause reading input until a queued job starts (nothing is lost)'
reject\t'Record the job as rejected, reason queue_full'"
complete -c lanes -n "__fish_lanes_needs_command" -l coalesce -d 'Coalesce waiting jobs per key: `latest` keeps at most one running and one pending job per key, a newer job replacing the pending one (recorded as superseded) [default: off]' -r -f -a "off\t'Every job runs'
latest\t'A key has at most one running and one pending job; a newer job replaces the pending one'"
complete -c lanes -n "__fish_lanes_needs_command" -l retries -d 'Re-run a failed job up to N more times, first in its own lane [default: 0]' -r
complete -c lanes -n "__fish_lanes_needs_command" -l retry-delay -d 'Pause before each retry; the key\'s later jobs wait behind it [default: 0s]' -r
complete -c lanes -n "__fish_lanes_needs_command" -l lock-dir -d 'Share key lanes with every lanes process given the same DIR (created when missing): at most one job per key in flight across all of them, first come first served. Also `LANES_LOCK_DIR`. A job holds its key (descriptor 3) for as long as it lives' -r -F
complete -c lanes -n "__fish_lanes_needs_command" -l shared-max-concurrent -d 'With --lock-dir: at most N jobs in flight across every process sharing DIR, on top of each process\'s own -j. A job holds its shared slot on descriptor 4' -r
complete -c lanes -n "__fish_lanes_needs_command" -l coordinate -d 'Share key lanes with every lanes process on every host given the same PostgreSQL URL (`postgres://USER@HOST:PORT/DB`; also `LANES_COORDINATE`, and the `PG*` environment variables and ~/.pgpass for what the URL leaves out): at most one job per key in flight across the fleet, first come first served. A job holds its key\'s database session (descriptor 3) for as long as it lives' -r
complete -c lanes -n "__fish_lanes_needs_command" -l namespace -d 'With --coordinate: the fleet\'s name in the database, so that several fleets may share one [default: lanes]' -r
complete -c lanes -n "__fish_lanes_needs_command" -l host-id -d 'With --coordinate: how this host is named to the others (`lanes locks`, `lock_holder`) [default: the host name]' -r
complete -c lanes -n "__fish_lanes_needs_command" -l max-queued-weight -d 'At most W of weight admitted but not yet started, across all keys (each job counts its weight, 1 when it declares none), on top of --max-queued; --on-full applies to both [default: no bound]' -r
complete -c lanes -n "__fish_lanes_needs_command" -l weight -d 'Every job\'s share of -j unless the manifest gives its own `weight`: a job of weight W starts only when W units of -j are free [default: 1]' -r
complete -c lanes -n "__fish_lanes_needs_command" -l resource -d 'A named resource of the run (repeatable; overrides the manifest\'s `[resources]` entry of that name): `NAME=N` an amount (`cpu=8`, `mem=32G`: K, M, G, T, P are powers of 1024) or `NAME=ID,ID,…` named units (`gpu=0,1,2,3`; one unit: `port=8001,`)' -r
complete -c lanes -n "__fish_lanes_needs_command" -l needs -d 'What every job needs of the run\'s resources unless the manifest gives its own `needs`: `NAME=N,…` (`gpu=1,mem=8G`). A job starts only when all of it is free, and holds it until its process group is empty; named units are handed over as `LANES_RESOURCE_<NAME>` and `{res.NAME}`' -r
complete -c lanes -n "__fish_lanes_needs_command" -l reserve-after -d 'Once the first waiting key whose job does not fit (its weight or a resource is short) has waited D, what it needs is set aside for it: later keys start only in what is free beyond it, so it is not starved. 0s sets aside at once (strict order between keys) [default: 0s]' -r
complete -c lanes -n "__fish_lanes_needs_command" -l command -d 'Treat the text after the tab as an argument and run TEMPLATE for it: `{}` is the argument (a batch\'s arguments), `{key}` the key, `{seq}` and `{slot}` numbers; every substitution is shell-quoted. Without `{}`, the argument is appended. `{{`/`}}` are literal braces' -r
complete -c lanes -n "__fish_lanes_needs_command" -l batch-size -d 'With --command: merge up to N waiting jobs of one lane into one run; `{}` expands to all their arguments, in lane order [default: 1]' -r
complete -c lanes -n "__fish_lanes_needs_command" -l batch-bytes -d 'With --command: at most B bytes of quoted arguments in one batch (a batch always holds at least one job); without --batch-size, batches by bytes alone, as `xargs -s` [default: 100000, under Linux\'s 128 KiB limit on one argument; more than that limit, less the template\'s own text, is refused]' -r
complete -c lanes -n "__fish_lanes_needs_command" -l batch-delay -d 'With --command: a lane whose batch is not full waits until its oldest job has waited D (a debounce for streamed input); a full batch starts at once [default: 0s]' -r
complete -c lanes -n "__fish_lanes_needs_command" -l resume -d 'Skip every job that succeeded (or was skipped so) in an earlier report (matched by key, command and occurrence number); each gets a `skipped` record. A torn last line in REPORT is ignored; a file that is not a lanes report is refused. REPORT may be the same file as --report: it is read before the new report is written' -r -F
complete -c lanes -n "__fish_lanes_needs_command" -l backend -d 'Where jobs run: `local` (here, each in a process group of its own) or `slurm` (each under `srun` on a Slurm cluster, one job per key at a time cluster-wide through `--dependency=singleton`)' -r -f -a "local\t'Here, each job in a process group of its own'
slurm\t'On a Slurm cluster, each job under `srun`'"
complete -c lanes -n "__fish_lanes_needs_command" -l slurm-name-prefix -d 'Slurm: job names are PREFIX.HASH(key); runs sharing a prefix share their keys\' lanes on the cluster (default: lanes)' -r
complete -c lanes -n "__fish_lanes_needs_command" -l slurm-license -d 'Slurm: every job takes one of the cluster license NAME (`--licenses=NAME:1`), a cluster-wide cap' -r
complete -c lanes -n "__fish_lanes_needs_command" -l slurm-partition -d 'Slurm: `srun --partition`' -r
complete -c lanes -n "__fish_lanes_needs_command" -l slurm-account -d 'Slurm: `srun --account`' -r
complete -c lanes -n "__fish_lanes_needs_command" -l slurm-qos -d 'Slurm: `srun --qos`' -r
complete -c lanes -n "__fish_lanes_needs_command" -l events -d 'Write JSON Lines lifecycle events (queued with `ahead`, started, ended) to FILE' -r -F
complete -c lanes -n "__fish_lanes_needs_command" -l report -d 'Write the JSON Lines report to FILE' -r -F
complete -c lanes -n "__fish_lanes_needs_command" -l output -d 'How job output is shown' -r -f -a "prefixed\t'Each line whole, prefixed with the job\'s key'
grouped\t'Each job\'s whole output in one block when it ends, after a header line'
raw\t'Bytes as they come, no prefix'
none\t'Discarded'"
complete -c lanes -n "__fish_lanes_needs_command" -l color -d 'Colour the key prefixes: `auto` on a terminal unless NO_COLOR is set or CI is true' -r -f -a "auto\t'When the stream is a terminal, NO_COLOR is not set and CI is not true'
always\t'Always, whatever the stream'
never\t'Never'"
complete -c lanes -n "__fish_lanes_needs_command" -l progress -d 'The live display on stderr: `auto` when stderr is a terminal, unless NO_COLOR is set, CI is true or --color never' -r -f -a "auto\t'When the stream is a terminal, NO_COLOR is not set and CI is not true'
always\t'Always, whatever the stream'
never\t'Never'"
complete -c lanes -n "__fish_lanes_needs_command" -l junit -d 'Write JUnit XML to FILE when the run ends: a test suite per key, a test case per job' -r -F
complete -c lanes -n "__fish_lanes_needs_command" -l results -d 'Also write each job\'s stdout and stderr to files of their own under DIR (created when missing), named from the seq and the escaped key: `000042-KEY.stdout`. A DIR that holds files is refused, so that two runs never mix, unless --results-clean' -r -F
complete -c lanes -n "__fish_lanes_needs_command" -l requeue-lost -d 'With `lanes serve`: run again the jobs the journal says were running when the earlier server ended without recording them, instead of recording them interrupted, reason `server_lost`'
complete -c lanes -n "__fish_lanes_needs_command" -l no-requeue-lost -d 'Undo --requeue-lost'
complete -c lanes -n "__fish_lanes_needs_command" -s 0 -l null -d 'Records end with a NUL byte instead of a newline (`find -print0`, `xargs -0`), so that arguments and commands may hold newlines'
complete -c lanes -n "__fish_lanes_needs_command" -l no-null -d 'Records end with a newline (undoes -0)'
complete -c lanes -n "__fish_lanes_needs_command" -l dry-run -d 'Print what would run, per key in order, with its round, slot and batch (as if every job took the same time and succeeded), then exit 0: nothing runs, no report is written'
complete -c lanes -n "__fish_lanes_needs_command" -l no-dry-run -d 'Undo --dry-run'
complete -c lanes -n "__fish_lanes_needs_command" -l cancel-in-progress -d 'A newer job of a key also interrupts the key\'s running job (superseded), then starts. Implies --coalesce latest'
complete -c lanes -n "__fish_lanes_needs_command" -l no-cancel-in-progress -d 'Undo --cancel-in-progress (and a manifest\'s `cancel_in_progress = true`)'
complete -c lanes -n "__fish_lanes_needs_command" -l fail-fast -d 'After the first failed job, start nothing more and stop the running jobs'
complete -c lanes -n "__fish_lanes_needs_command" -l no-fail-fast -d 'Undo --fail-fast (and a manifest\'s `fail_fast = true`)'
complete -c lanes -n "__fish_lanes_needs_command" -l sticky-slots -d 'Bind each key to the slot its first job ran in; later jobs of the key wait for that slot (`LANES_SLOT`), for per-slot resources such as a GPU or a port'
complete -c lanes -n "__fish_lanes_needs_command" -l coordinate-records -d 'With --coordinate: write every job record into the database\'s `lanes_records` table as well (the report is unchanged), so that the fleet has one history to query'
complete -c lanes -n "__fish_lanes_needs_command" -l no-coordinate-records -d 'Undo --coordinate-records'
complete -c lanes -n "__fish_lanes_needs_command" -l no-sticky-slots -d 'Undo --sticky-slots (and a manifest\'s `sticky_slots = true`)'
complete -c lanes -n "__fish_lanes_needs_command" -l strict -d 'Validate the whole input before anything starts; exit 2 on the first invalid line'
complete -c lanes -n "__fish_lanes_needs_command" -l no-strict -d 'Undo --strict'
complete -c lanes -n "__fish_lanes_needs_command" -l json -d 'Write the JSON Lines report to stdout; all job output then goes to stderr'
complete -c lanes -n "__fish_lanes_needs_command" -l no-json -d 'Undo --json'
complete -c lanes -n "__fish_lanes_needs_command" -l keep-order -d 'With --output grouped: print the blocks in input order (a block waits for the blocks of earlier jobs)'
complete -c lanes -n "__fish_lanes_needs_command" -l no-keep-order -d 'Undo --keep-order'
complete -c lanes -n "__fish_lanes_needs_command" -l results-clean -d 'With --results: first remove the files an earlier run wrote in DIR (anything else there is refused)'
complete -c lanes -n "__fish_lanes_needs_command" -l no-results-clean -d 'Undo --results-clean'
complete -c lanes -n "__fish_lanes_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lanes -n "__fish_lanes_needs_command" -s V -l version -d 'Print version'
complete -c lanes -n "__fish_lanes_needs_command" -a "locks" -d 'List the keys held in a lock directory (--lock-dir) or a fleet\'s database (--coordinate), their holders and their waiters'
complete -c lanes -n "__fish_lanes_needs_command" -a "submit" -d 'Submit a job to a `lanes serve` (KEY -- COMMAND...), or without KEY one job per stdin line of KEY<TAB>COMMAND. Exit status: 0 started, 1 failed (its process could not start), 10 queued, 11 coalesced, 12 rejected, 13 closed, 2 error; with --wait, the job\'s own'
complete -c lanes -n "__fish_lanes_needs_command" -a "cancel" -d 'Drop a key\'s waiting jobs and stop its running job (reason `cancelled`) on a `lanes serve`; returns once that job\'s processes are gone'
complete -c lanes -n "__fish_lanes_needs_command" -a "status" -d 'What a `lanes serve` runs and what waits, its counters and its cap'
complete -c lanes -n "__fish_lanes_needs_command" -a "set" -d 'Change a `lanes serve`\'s cap on running jobs; lowering it stops nothing'
complete -c lanes -n "__fish_lanes_needs_command" -a "drain" -d 'Make a `lanes serve` admit nothing more, finish what it admitted and end; returns once it has written its report'
complete -c lanes -n "__fish_lanes_needs_command" -a "close" -d 'Make a `lanes serve` admit nothing more, stop every job (reason `shutdown`) and end; returns once it has written its report'
complete -c lanes -n "__fish_lanes_needs_command" -a "timeline" -d 'Draw a run from its report (--report): what ran when, in which slot, and why every job waited; as an HTML page, a Chrome trace (JSON, for Perfetto) or Markdown with a Mermaid Gantt chart'
complete -c lanes -n "__fish_lanes_needs_command" -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c lanes -n "__fish_lanes_using_subcommand locks" -l coordinate -d 'The fleet\'s database (also `LANES_COORDINATE`)' -r
complete -c lanes -n "__fish_lanes_using_subcommand locks" -l namespace -d 'The fleet\'s namespace in the database' -r
complete -c lanes -n "__fish_lanes_using_subcommand locks" -s h -l help -d 'Print help'
complete -c lanes -n "__fish_lanes_using_subcommand submit" -l socket -d 'The server\'s socket (default: LANES_SOCKET, else $XDG_RUNTIME_DIR/lanes/lanes.sock, else /tmp/lanes-UID/lanes.sock)' -r -F
complete -c lanes -n "__fish_lanes_using_subcommand submit" -l json -d 'Print the answers (and with --wait the record) as JSON lines'
complete -c lanes -n "__fish_lanes_using_subcommand submit" -l wait -d 'Wait for the job\'s record and exit as the job did (0, its exit status, 128 + the signal, or 1)'
complete -c lanes -n "__fish_lanes_using_subcommand submit" -s h -l help -d 'Print help'
complete -c lanes -n "__fish_lanes_using_subcommand cancel" -l socket -d 'The server\'s socket' -r -F
complete -c lanes -n "__fish_lanes_using_subcommand cancel" -l json -d 'Print the answer as JSON'
complete -c lanes -n "__fish_lanes_using_subcommand cancel" -s h -l help -d 'Print help'
complete -c lanes -n "__fish_lanes_using_subcommand status" -l socket -d 'The server\'s socket' -r -F
complete -c lanes -n "__fish_lanes_using_subcommand status" -l json -d 'Print the answer as JSON'
complete -c lanes -n "__fish_lanes_using_subcommand status" -s h -l help -d 'Print help'
complete -c lanes -n "__fish_lanes_using_subcommand set" -l socket -d 'The server\'s socket' -r -F
complete -c lanes -n "__fish_lanes_using_subcommand set" -s j -l max-concurrent -d 'The new cap' -r
complete -c lanes -n "__fish_lanes_using_subcommand set" -l json -d 'Print the answer as JSON'
complete -c lanes -n "__fish_lanes_using_subcommand set" -s h -l help -d 'Print help'
complete -c lanes -n "__fish_lanes_using_subcommand drain" -l socket -d 'The server\'s socket' -r -F
complete -c lanes -n "__fish_lanes_using_subcommand drain" -l json -d 'Print the answer as JSON'
complete -c lanes -n "__fish_lanes_using_subcommand drain" -s h -l help -d 'Print help'
complete -c lanes -n "__fish_lanes_using_subcommand close" -l socket -d 'The server\'s socket' -r -F
complete -c lanes -n "__fish_lanes_using_subcommand close" -l json -d 'Print the answer as JSON'
complete -c lanes -n "__fish_lanes_using_subcommand close" -s h -l help -d 'Print help'
complete -c lanes -n "__fish_lanes_using_subcommand timeline" -l events -d 'The run\'s events file (--events; `-`: stdin): jobs still running or waiting, which have no record yet, are drawn from it' -r -F
complete -c lanes -n "__fish_lanes_using_subcommand timeline" -s o -l output -d 'Where to write the timeline (`-`: stdout)' -r -F
complete -c lanes -n "__fish_lanes_using_subcommand timeline" -l format -d 'html, json (Chrome Trace Event format) or md (Mermaid); by default from OUT\'s extension (.html/.htm, .json, .md)' -r -f -a "html\t''
json\t''
md\t''"
complete -c lanes -n "__fish_lanes_using_subcommand timeline" -s h -l help -d 'Print help'
complete -c lanes -n "__fish_lanes_using_subcommand help; and not __fish_seen_subcommand_from locks submit cancel status set drain close timeline help" -f -a "locks" -d 'List the keys held in a lock directory (--lock-dir) or a fleet\'s database (--coordinate), their holders and their waiters'
complete -c lanes -n "__fish_lanes_using_subcommand help; and not __fish_seen_subcommand_from locks submit cancel status set drain close timeline help" -f -a "submit" -d 'Submit a job to a `lanes serve` (KEY -- COMMAND...), or without KEY one job per stdin line of KEY<TAB>COMMAND. Exit status: 0 started, 1 failed (its process could not start), 10 queued, 11 coalesced, 12 rejected, 13 closed, 2 error; with --wait, the job\'s own'
complete -c lanes -n "__fish_lanes_using_subcommand help; and not __fish_seen_subcommand_from locks submit cancel status set drain close timeline help" -f -a "cancel" -d 'Drop a key\'s waiting jobs and stop its running job (reason `cancelled`) on a `lanes serve`; returns once that job\'s processes are gone'
complete -c lanes -n "__fish_lanes_using_subcommand help; and not __fish_seen_subcommand_from locks submit cancel status set drain close timeline help" -f -a "status" -d 'What a `lanes serve` runs and what waits, its counters and its cap'
complete -c lanes -n "__fish_lanes_using_subcommand help; and not __fish_seen_subcommand_from locks submit cancel status set drain close timeline help" -f -a "set" -d 'Change a `lanes serve`\'s cap on running jobs; lowering it stops nothing'
complete -c lanes -n "__fish_lanes_using_subcommand help; and not __fish_seen_subcommand_from locks submit cancel status set drain close timeline help" -f -a "drain" -d 'Make a `lanes serve` admit nothing more, finish what it admitted and end; returns once it has written its report'
complete -c lanes -n "__fish_lanes_using_subcommand help; and not __fish_seen_subcommand_from locks submit cancel status set drain close timeline help" -f -a "close" -d 'Make a `lanes serve` admit nothing more, stop every job (reason `shutdown`) and end; returns once it has written its report'
complete -c lanes -n "__fish_lanes_using_subcommand help; and not __fish_seen_subcommand_from locks submit cancel status set drain close timeline help" -f -a "timeline" -d 'Draw a run from its report (--report): what ran when, in which slot, and why every job waited; as an HTML page, a Chrome trace (JSON, for Perfetto) or Markdown with a Mermaid Gantt chart'
complete -c lanes -n "__fish_lanes_using_subcommand help; and not __fish_seen_subcommand_from locks submit cancel status set drain close timeline help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
