
using namespace System.Management.Automation
using namespace System.Management.Automation.Language

Register-ArgumentCompleter -Native -CommandName 'lanes' -ScriptBlock {
    param($wordToComplete, $commandAst, $cursorPosition)

    $commandElements = $commandAst.CommandElements
    $command = @(
        'lanes'
        for ($i = 1; $i -lt $commandElements.Count; $i++) {
            $element = $commandElements[$i]
            if ($element -isnot [StringConstantExpressionAst] -or
                $element.StringConstantType -ne [StringConstantType]::BareWord -or
                $element.Value.StartsWith('-') -or
                $element.Value -eq $wordToComplete) {
                break
        }
        $element.Value
    }) -join ';'

    $completions = @(switch ($command) {
        'lanes' {
            [CompletionResult]::new('--socket', '--socket', [CompletionResultType]::ParameterName, 'With `lanes serve`: the socket to listen on (default: LANES_SOCKET, else $XDG_RUNTIME_DIR/lanes/lanes.sock, else /tmp/lanes-UID/lanes.sock, in a directory only this user can enter)')
            [CompletionResult]::new('--journal', '--journal', [CompletionResultType]::ParameterName, 'With `lanes serve`: the journal of admitted jobs (default: beside the socket, named after it, `lanes.journal`). A server started on a journal an earlier one left re-admits the jobs that have no record yet, in their order')
            [CompletionResult]::new('-a', '-a', [CompletionResultType]::ParameterName, 'Read the input arguments from FILE, one per line (per NUL-terminated record with -0), instead of stdin')
            [CompletionResult]::new('--arg-file', '--arg-file', [CompletionResultType]::ParameterName, 'Read the input arguments from FILE, one per line (per NUL-terminated record with -0), instead of stdin')
            [CompletionResult]::new('--key', '--key', [CompletionResultType]::ParameterName, 'Compute each job''s key from its input record (then a whole record, no tab): `{}` the record, `{1}`, `{2}`... its columns (--colsep), `{/}` basename, `{//}` dirname, `{.}` without extension, `{/.}` basename without extension. Default with a trailing command, `:::` or -a: `{}`, every distinct record its own key')
            [CompletionResult]::new('--colsep', '--colsep', [CompletionResultType]::ParameterName, 'Split records into the columns `{1}`, `{2}`... at the string SEP (not a regex)')
            [CompletionResult]::new('--manifest', '--manifest', [CompletionResultType]::ParameterName, 'Read FILE as a TOML manifest whatever its name')
            [CompletionResult]::new('-j', '-j', [CompletionResultType]::ParameterName, 'At most N jobs in flight overall [default: the number of CPUs]')
            [CompletionResult]::new('--max-concurrent', '--max-concurrent', [CompletionResultType]::ParameterName, 'At most N jobs in flight overall [default: the number of CPUs]')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'Per-job turn timeout: seconds (`20`, `0.5`) or units (`250ms`, `10m`). Past it the job''s process group gets SIGTERM, then SIGKILL after the grace period')
            [CompletionResult]::new('--grace', '--grace', [CompletionResultType]::ParameterName, 'Grace period between SIGTERM (or the forwarded signal) and SIGKILL [default: 5s]')
            [CompletionResult]::new('--leak-window', '--leak-window', [CompletionResultType]::ParameterName, 'How long to wait, after a job''s shell exits, for the rest of its process group and for EOF on its pipes before the leftovers are terminated and the job marked `leaked`')
            [CompletionResult]::new('--containment', '--containment', [CompletionResultType]::ParameterName, 'What holds a job''s processes together: `cgroup` (a cgroup v2 per job: nothing escapes by changing process group or session), `process-group` (each job''s own process group), or `auto` (cgroup where lanes can create one, else process group)')
            [CompletionResult]::new('--shell', '--shell', [CompletionResultType]::ParameterName, 'Shell that runs each command as `SHELL -c COMMAND` [default: sh]')
            [CompletionResult]::new('--max-queued', '--max-queued', [CompletionResultType]::ParameterName, 'At most N jobs admitted but not yet started, across all keys [default: 10000]')
            [CompletionResult]::new('--on-full', '--on-full', [CompletionResultType]::ParameterName, 'What a new job meets when --max-queued jobs wait: `wait` pauses reading input until there is room (backpressure); `reject` records it as rejected (queue_full) unless it starts at once (its key idle, a slot free) [default: wait]')
            [CompletionResult]::new('--coalesce', '--coalesce', [CompletionResultType]::ParameterName, 'Coalesce waiting jobs per key: `latest` keeps at most one running and one pending job per key, a newer job replacing the pending one (recorded as superseded) [default: off]')
            [CompletionResult]::new('--retries', '--retries', [CompletionResultType]::ParameterName, 'Re-run a failed job up to N more times, first in its own lane [default: 0]')
            [CompletionResult]::new('--retry-delay', '--retry-delay', [CompletionResultType]::ParameterName, 'Pause before each retry; the key''s later jobs wait behind it [default: 0s]')
            [CompletionResult]::new('--lock-dir', '--lock-dir', [CompletionResultType]::ParameterName, 'Share key lanes with every lanes process given the same DIR (created when missing): at most one job per key in flight across all of them, first come first served. Also `LANES_LOCK_DIR`. A job holds its key (descriptor 3) for as long as it lives')
            [CompletionResult]::new('--shared-max-concurrent', '--shared-max-concurrent', [CompletionResultType]::ParameterName, 'With --lock-dir: at most N jobs in flight across every process sharing DIR, on top of each process''s own -j. A job holds its shared slot on descriptor 4')
            [CompletionResult]::new('--coordinate', '--coordinate', [CompletionResultType]::ParameterName, 'Share key lanes with every lanes process on every host given the same PostgreSQL URL (`postgres://USER@HOST:PORT/DB`; also `LANES_COORDINATE`, and the `PG*` environment variables and ~/.pgpass for what the URL leaves out): at most one job per key in flight across the fleet, first come first served. A job holds its key''s database session (descriptor 3) for as long as it lives')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'With --coordinate: the fleet''s name in the database, so that several fleets may share one [default: lanes]')
            [CompletionResult]::new('--host-id', '--host-id', [CompletionResultType]::ParameterName, 'With --coordinate: how this host is named to the others (`lanes locks`, `lock_holder`) [default: the host name]')
            [CompletionResult]::new('--max-queued-weight', '--max-queued-weight', [CompletionResultType]::ParameterName, 'At most W of weight admitted but not yet started, across all keys (each job counts its weight, 1 when it declares none), on top of --max-queued; --on-full applies to both [default: no bound]')
            [CompletionResult]::new('--weight', '--weight', [CompletionResultType]::ParameterName, 'Every job''s share of -j unless the manifest gives its own `weight`: a job of weight W starts only when W units of -j are free [default: 1]')
            [CompletionResult]::new('--resource', '--resource', [CompletionResultType]::ParameterName, 'A named resource of the run (repeatable; overrides the manifest''s `[resources]` entry of that name): `NAME=N` an amount (`cpu=8`, `mem=32G`: K, M, G, T, P are powers of 1024) or `NAME=ID,ID,…` named units (`gpu=0,1,2,3`; one unit: `port=8001,`)')
            [CompletionResult]::new('--needs', '--needs', [CompletionResultType]::ParameterName, 'What every job needs of the run''s resources unless the manifest gives its own `needs`: `NAME=N,…` (`gpu=1,mem=8G`). A job starts only when all of it is free, and holds it until its process group is empty; named units are handed over as `LANES_RESOURCE_<NAME>` and `{res.NAME}`')
            [CompletionResult]::new('--reserve-after', '--reserve-after', [CompletionResultType]::ParameterName, 'Once the first waiting key whose job does not fit (its weight or a resource is short) has waited D, what it needs is set aside for it: later keys start only in what is free beyond it, so it is not starved. 0s sets aside at once (strict order between keys) [default: 0s]')
            [CompletionResult]::new('--command', '--command', [CompletionResultType]::ParameterName, 'Treat the text after the tab as an argument and run TEMPLATE for it: `{}` is the argument (a batch''s arguments), `{key}` the key, `{seq}` and `{slot}` numbers; every substitution is shell-quoted. Without `{}`, the argument is appended. `{{`/`}}` are literal braces')
            [CompletionResult]::new('--batch-size', '--batch-size', [CompletionResultType]::ParameterName, 'With --command: merge up to N waiting jobs of one lane into one run; `{}` expands to all their arguments, in lane order [default: 1]')
            [CompletionResult]::new('--batch-bytes', '--batch-bytes', [CompletionResultType]::ParameterName, 'With --command: at most B bytes of quoted arguments in one batch (a batch always holds at least one job); without --batch-size, batches by bytes alone, as `xargs -s` [default: 100000, under Linux''s 128 KiB limit on one argument; more than that limit, less the template''s own text, is refused]')
            [CompletionResult]::new('--batch-delay', '--batch-delay', [CompletionResultType]::ParameterName, 'With --command: a lane whose batch is not full waits until its oldest job has waited D (a debounce for streamed input); a full batch starts at once [default: 0s]')
            [CompletionResult]::new('--resume', '--resume', [CompletionResultType]::ParameterName, 'Skip every job that succeeded (or was skipped so) in an earlier report (matched by key, command and occurrence number); each gets a `skipped` record. A torn last line in REPORT is ignored; a file that is not a lanes report is refused. REPORT may be the same file as --report: it is read before the new report is written')
            [CompletionResult]::new('--backend', '--backend', [CompletionResultType]::ParameterName, 'Where jobs run: `local` (here, each in a process group of its own) or `slurm` (each under `srun` on a Slurm cluster, one job per key at a time cluster-wide through `--dependency=singleton`)')
            [CompletionResult]::new('--slurm-name-prefix', '--slurm-name-prefix', [CompletionResultType]::ParameterName, 'Slurm: job names are PREFIX.HASH(key); runs sharing a prefix share their keys'' lanes on the cluster (default: lanes)')
            [CompletionResult]::new('--slurm-license', '--slurm-license', [CompletionResultType]::ParameterName, 'Slurm: every job takes one of the cluster license NAME (`--licenses=NAME:1`), a cluster-wide cap')
            [CompletionResult]::new('--slurm-partition', '--slurm-partition', [CompletionResultType]::ParameterName, 'Slurm: `srun --partition`')
            [CompletionResult]::new('--slurm-account', '--slurm-account', [CompletionResultType]::ParameterName, 'Slurm: `srun --account`')
            [CompletionResult]::new('--slurm-qos', '--slurm-qos', [CompletionResultType]::ParameterName, 'Slurm: `srun --qos`')
            [CompletionResult]::new('--events', '--events', [CompletionResultType]::ParameterName, 'Write JSON Lines lifecycle events (queued with `ahead`, started, ended) to FILE')
            [CompletionResult]::new('--report', '--report', [CompletionResultType]::ParameterName, 'Write the JSON Lines report to FILE')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'How job output is shown')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'Colour the key prefixes: `auto` on a terminal unless NO_COLOR is set or CI is true')
            [CompletionResult]::new('--progress', '--progress', [CompletionResultType]::ParameterName, 'The live display on stderr: `auto` when stderr is a terminal, unless NO_COLOR is set, CI is true or --color never')
            [CompletionResult]::new('--junit', '--junit', [CompletionResultType]::ParameterName, 'Write JUnit XML to FILE when the run ends: a test suite per key, a test case per job')
            [CompletionResult]::new('--results', '--results', [CompletionResultType]::ParameterName, 'Also write each job''s stdout and stderr to files of their own under DIR (created when missing), named from the seq and the escaped key: `000042-KEY.stdout`. A DIR that holds files is refused, so that two runs never mix, unless --results-clean')
            [CompletionResult]::new('--requeue-lost', '--requeue-lost', [CompletionResultType]::ParameterName, 'With `lanes serve`: run again the jobs the journal says were running when the earlier server ended without recording them, instead of recording them interrupted, reason `server_lost`')
            [CompletionResult]::new('--no-requeue-lost', '--no-requeue-lost', [CompletionResultType]::ParameterName, 'Undo --requeue-lost')
            [CompletionResult]::new('-0', '-0', [CompletionResultType]::ParameterName, 'Records end with a NUL byte instead of a newline (`find -print0`, `xargs -0`), so that arguments and commands may hold newlines')
            [CompletionResult]::new('--null', '--null', [CompletionResultType]::ParameterName, 'Records end with a NUL byte instead of a newline (`find -print0`, `xargs -0`), so that arguments and commands may hold newlines')
            [CompletionResult]::new('--no-null', '--no-null', [CompletionResultType]::ParameterName, 'Records end with a newline (undoes -0)')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'Print what would run, per key in order, with its round, slot and batch (as if every job took the same time and succeeded), then exit 0: nothing runs, no report is written')
            [CompletionResult]::new('--no-dry-run', '--no-dry-run', [CompletionResultType]::ParameterName, 'Undo --dry-run')
            [CompletionResult]::new('--cancel-in-progress', '--cancel-in-progress', [CompletionResultType]::ParameterName, 'A newer job of a key also interrupts the key''s running job (superseded), then starts. Implies --coalesce latest')
            [CompletionResult]::new('--no-cancel-in-progress', '--no-cancel-in-progress', [CompletionResultType]::ParameterName, 'Undo --cancel-in-progress (and a manifest''s `cancel_in_progress = true`)')
            [CompletionResult]::new('--fail-fast', '--fail-fast', [CompletionResultType]::ParameterName, 'After the first failed job, start nothing more and stop the running jobs')
            [CompletionResult]::new('--no-fail-fast', '--no-fail-fast', [CompletionResultType]::ParameterName, 'Undo --fail-fast (and a manifest''s `fail_fast = true`)')
            [CompletionResult]::new('--sticky-slots', '--sticky-slots', [CompletionResultType]::ParameterName, 'Bind each key to the slot its first job ran in; later jobs of the key wait for that slot (`LANES_SLOT`), for per-slot resources such as a GPU or a port')
            [CompletionResult]::new('--coordinate-records', '--coordinate-records', [CompletionResultType]::ParameterName, 'With --coordinate: write every job record into the database''s `lanes_records` table as well (the report is unchanged), so that the fleet has one history to query')
            [CompletionResult]::new('--no-coordinate-records', '--no-coordinate-records', [CompletionResultType]::ParameterName, 'Undo --coordinate-records')
            [CompletionResult]::new('--no-sticky-slots', '--no-sticky-slots', [CompletionResultType]::ParameterName, 'Undo --sticky-slots (and a manifest''s `sticky_slots = true`)')
            [CompletionResult]::new('--strict', '--strict', [CompletionResultType]::ParameterName, 'Validate the whole input before anything starts; exit 2 on the first invalid line')
            [CompletionResult]::new('--no-strict', '--no-strict', [CompletionResultType]::ParameterName, 'Undo --strict')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Write the JSON Lines report to stdout; all job output then goes to stderr')
            [CompletionResult]::new('--no-json', '--no-json', [CompletionResultType]::ParameterName, 'Undo --json')
            [CompletionResult]::new('--keep-order', '--keep-order', [CompletionResultType]::ParameterName, 'With --output grouped: print the blocks in input order (a block waits for the blocks of earlier jobs)')
            [CompletionResult]::new('--no-keep-order', '--no-keep-order', [CompletionResultType]::ParameterName, 'Undo --keep-order')
            [CompletionResult]::new('--results-clean', '--results-clean', [CompletionResultType]::ParameterName, 'With --results: first remove the files an earlier run wrote in DIR (anything else there is refused)')
            [CompletionResult]::new('--no-results-clean', '--no-results-clean', [CompletionResultType]::ParameterName, 'Undo --results-clean')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('locks', 'locks', [CompletionResultType]::ParameterValue, 'List the keys held in a lock directory (--lock-dir) or a fleet''s database (--coordinate), their holders and their waiters')
            [CompletionResult]::new('submit', 'submit', [CompletionResultType]::ParameterValue, 'Submit a job to a `lanes serve` (KEY -- COMMAND...), or without KEY one job per stdin line of KEY<TAB>COMMAND. Exit status: 0 started, 1 failed (its process could not start), 10 queued, 11 coalesced, 12 rejected, 13 closed, 2 error; with --wait, the job''s own')
            [CompletionResult]::new('cancel', 'cancel', [CompletionResultType]::ParameterValue, 'Drop a key''s waiting jobs and stop its running job (reason `cancelled`) on a `lanes serve`; returns once that job''s processes are gone')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'What a `lanes serve` runs and what waits, its counters and its cap')
            [CompletionResult]::new('set', 'set', [CompletionResultType]::ParameterValue, 'Change a `lanes serve`''s cap on running jobs; lowering it stops nothing')
            [CompletionResult]::new('drain', 'drain', [CompletionResultType]::ParameterValue, 'Make a `lanes serve` admit nothing more, finish what it admitted and end; returns once it has written its report')
            [CompletionResult]::new('close', 'close', [CompletionResultType]::ParameterValue, 'Make a `lanes serve` admit nothing more, stop every job (reason `shutdown`) and end; returns once it has written its report')
            [CompletionResult]::new('timeline', 'timeline', [CompletionResultType]::ParameterValue, 'Draw a run from its report (--report): what ran when, in which slot, and why every job waited; as an HTML page, a Chrome trace (JSON, for Perfetto) or Markdown with a Mermaid Gantt chart')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'lanes;locks' {
            [CompletionResult]::new('--coordinate', '--coordinate', [CompletionResultType]::ParameterName, 'The fleet''s database (also `LANES_COORDINATE`)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'The fleet''s namespace in the database')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'lanes;submit' {
            [CompletionResult]::new('--socket', '--socket', [CompletionResultType]::ParameterName, 'The server''s socket (default: LANES_SOCKET, else $XDG_RUNTIME_DIR/lanes/lanes.sock, else /tmp/lanes-UID/lanes.sock)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print the answers (and with --wait the record) as JSON lines')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'Wait for the job''s record and exit as the job did (0, its exit status, 128 + the signal, or 1)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'lanes;cancel' {
            [CompletionResult]::new('--socket', '--socket', [CompletionResultType]::ParameterName, 'The server''s socket')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print the answer as JSON')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'lanes;status' {
            [CompletionResult]::new('--socket', '--socket', [CompletionResultType]::ParameterName, 'The server''s socket')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print the answer as JSON')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'lanes;set' {
            [CompletionResult]::new('--socket', '--socket', [CompletionResultType]::ParameterName, 'The server''s socket')
            [CompletionResult]::new('-j', '-j', [CompletionResultType]::ParameterName, 'The new cap')
            [CompletionResult]::new('--max-concurrent', '--max-concurrent', [CompletionResultType]::ParameterName, 'The new cap')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print the answer as JSON')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'lanes;drain' {
            [CompletionResult]::new('--socket', '--socket', [CompletionResultType]::ParameterName, 'The server''s socket')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print the answer as JSON')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'lanes;close' {
            [CompletionResult]::new('--socket', '--socket', [CompletionResultType]::ParameterName, 'The server''s socket')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print the answer as JSON')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'lanes;timeline' {
            [CompletionResult]::new('--events', '--events', [CompletionResultType]::ParameterName, 'The run''s events file (--events; `-`: stdin): jobs still running or waiting, which have no record yet, are drawn from it')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Where to write the timeline (`-`: stdout)')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Where to write the timeline (`-`: stdout)')
            [CompletionResult]::new('--format', '--format', [CompletionResultType]::ParameterName, 'html, json (Chrome Trace Event format) or md (Mermaid); by default from OUT''s extension (.html/.htm, .json, .md)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'lanes;help' {
            [CompletionResult]::new('locks', 'locks', [CompletionResultType]::ParameterValue, 'List the keys held in a lock directory (--lock-dir) or a fleet''s database (--coordinate), their holders and their waiters')
            [CompletionResult]::new('submit', 'submit', [CompletionResultType]::ParameterValue, 'Submit a job to a `lanes serve` (KEY -- COMMAND...), or without KEY one job per stdin line of KEY<TAB>COMMAND. Exit status: 0 started, 1 failed (its process could not start), 10 queued, 11 coalesced, 12 rejected, 13 closed, 2 error; with --wait, the job''s own')
            [CompletionResult]::new('cancel', 'cancel', [CompletionResultType]::ParameterValue, 'Drop a key''s waiting jobs and stop its running job (reason `cancelled`) on a `lanes serve`; returns once that job''s processes are gone')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'What a `lanes serve` runs and what waits, its counters and its cap')
            [CompletionResult]::new('set', 'set', [CompletionResultType]::ParameterValue, 'Change a `lanes serve`''s cap on running jobs; lowering it stops nothing')
            [CompletionResult]::new('drain', 'drain', [CompletionResultType]::ParameterValue, 'Make a `lanes serve` admit nothing more, finish what it admitted and end; returns once it has written its report')
            [CompletionResult]::new('close', 'close', [CompletionResultType]::ParameterValue, 'Make a `lanes serve` admit nothing more, stop every job (reason `shutdown`) and end; returns once it has written its report')
            [CompletionResult]::new('timeline', 'timeline', [CompletionResultType]::ParameterValue, 'Draw a run from its report (--report): what ran when, in which slot, and why every job waited; as an HTML page, a Chrome trace (JSON, for Perfetto) or Markdown with a Mermaid Gantt chart')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'lanes;help;locks' {
            break
        }
        'lanes;help;submit' {
            break
        }
        'lanes;help;cancel' {
            break
        }
        'lanes;help;status' {
            break
        }
        'lanes;help;set' {
            break
        }
        'lanes;help;drain' {
            break
        }
        'lanes;help;close' {
            break
        }
        'lanes;help;timeline' {
            break
        }
        'lanes;help;help' {
            break
        }
    })

    $completions.Where{ $_.CompletionText -like "$wordToComplete*" } |
        Sort-Object -Property ListItemText
}
