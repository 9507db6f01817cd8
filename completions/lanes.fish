complete -c lanes -s a -l arg-file -d 'Read the input arguments from FILE, one per line (per NUL-terminated record with -0), instead of stdin' -r -F
complete -c lanes -l key -d 'Compute each job\'s key from its input record (then a whole record, no tab): `{}` the record, `{1}`, `{2}`... its columns (--colsep), `{/}` basename, `{//}` dirname, `{.}` without extension, `{/.}` basename without extension. Default with a trailing command, `:::` or -a: `{}`, every distinct record its own key' -r
complete -c lanes -l colsep -d 'Split records into the columns `{1}`, `{2}`... at the string SEP (not a regex)' -r
complete -c lanes -l manifest -d 'Read FILE as a TOML manifest whatever its name' -r -F
complete -c lanes -s j -l max-concurrent -d 'At most N jobs in flight overall [default: the number of CPUs]' -r
complete -c lanes -l timeout -d 'Per-job turn timeout: seconds (`20`, `0.5`) or units (`250ms`, `10m`). Past it the job\'s process group gets SIGTERM, then SIGKILL after the grace period' -r
complete -c lanes -l grace -d 'Grace period between SIGTERM (or the forwarded signal) and SIGKILL [default: 5s]' -r
complete -c lanes -l leak-window -d 'How long to wait, after a job\'s shell exits, for the rest of its process group and for EOF on its pipes before the leftovers are terminated and the job marked `leaked`' -r
complete -c lanes -l containment -d 'What holds a job\'s processes together: `cgroup` (a cgroup v2 per job: nothing escapes by changing process group or session), `process-group` (each job\'s own process group), or `auto` (cgroup where lanes can create one, else process group)' -r -f -a "auto\t'A cgroup per job where lanes can create one, else the job\'s process group'
cgroup\t'A cgroup (v2) per job; an error (exit 2) where lanes cannot create one'
process-group\t'The job\'s own process group'"
complete -c lanes -l shell -d 'Shell that runs each command as `SHELL -c COMMAND` [default: sh]' -r
complete -c lanes -l max-queued -d 'At most N jobs admitted but not yet started, across all keys [default: 10000]' -r
complete -c lanes -l on-full -d 'What a new job meets when --max-queued jobs wait: `wait` pauses reading input until there is room (backpressure); `reject` records it as rejected (queue_full) [default: wait]' -r -f -a "wait\t'Pause reading input until a queued job starts (nothing is lost)'
reject\t'Record the job as rejected, reason queue_full'"
complete -c lanes -l coalesce -d 'Coalesce waiting jobs per key: `latest` keeps at most one running and one pending job per key, a newer job replacing the pending one (recorded as superseded) [default: off]' -r -f -a "off\t'Every job runs'
latest\t'A key has at most one running and one pending job; a newer job replaces the pending one'"
complete -c lanes -l retries -d 'Re-run a failed job up to N more times, first in its own lane [default: 0]' -r
complete -c lanes -l retry-delay -d 'Pause before each retry; the key\'s later jobs wait behind it [default: 0s]' -r
complete -c lanes -l command -d 'Treat the text after the tab as an argument and run TEMPLATE for it: `{}` is the argument (a batch\'s arguments), `{key}` the key, `{seq}` and `{slot}` numbers; every substitution is shell-quoted. Without `{}`, the argument is appended. `{{`/`}}` are literal braces' -r
complete -c lanes -l batch-size -d 'With --command: merge up to N waiting jobs of one lane into one run; `{}` expands to all their arguments, in lane order [default: 1]' -r
complete -c lanes -l batch-bytes -d 'With --command: at most B bytes of quoted arguments in one batch (a batch always holds at least one job) [default: 100000, under Linux\'s 128 KiB limit on one argument]' -r
complete -c lanes -l batch-delay -d 'With --command: a lane whose batch is not full waits until its oldest job has waited D (a debounce for streamed input); a full batch starts at once [default: 0s]' -r
complete -c lanes -l resume -d 'Skip every job that succeeded in an earlier report (matched by key, command and occurrence number); a torn last line in REPORT is ignored. REPORT may be the same file as --report: it is read before the new report is written' -r -F
complete -c lanes -l backend -d 'Where jobs run: `local` (here, each in a process group of its own) or `slurm` (each under `srun` on a Slurm cluster, one job per key at a time cluster-wide through `--dependency=singleton`)' -r -f -a "local\t'Here, each job in a process group of its own'
slurm\t'On a Slurm cluster, each job under `srun`'"
complete -c lanes -l slurm-name-prefix -d 'Slurm: job names are PREFIX.HASH(key); runs sharing a prefix share their keys\' lanes on the cluster' -r
complete -c lanes -l slurm-license -d 'Slurm: every job takes one of the cluster license NAME (`--licenses=NAME:1`), a cluster-wide cap' -r
complete -c lanes -l slurm-partition -d 'Slurm: `srun --partition`' -r
complete -c lanes -l slurm-account -d 'Slurm: `srun --account`' -r
complete -c lanes -l slurm-qos -d 'Slurm: `srun --qos`' -r
complete -c lanes -l events -d 'Write JSON Lines lifecycle events (queued with `ahead`, started, ended) to FILE' -r -F
complete -c lanes -l report -d 'Write the JSON Lines report to FILE' -r -F
complete -c lanes -l output -d 'How job output is shown' -r -f -a "prefixed\t'Each line whole, prefixed with the job\'s key'
grouped\t'Each job\'s whole output in one block when it ends, after a header line'
raw\t'Bytes as they come, no prefix'
none\t'Discarded'"
complete -c lanes -l color -d 'Colour the key prefixes: `auto` on a terminal unless NO_COLOR is set or CI is true' -r -f -a "auto\t'When the stream is a terminal, NO_COLOR is not set and CI is not true'
always\t'Always, whatever the stream'
never\t'Never'"
complete -c lanes -l progress -d 'The live display on stderr: `auto` when stderr is a terminal, unless NO_COLOR is set, CI is true or --color never' -r -f -a "auto\t'When the stream is a terminal, NO_COLOR is not set and CI is not true'
always\t'Always, whatever the stream'
never\t'Never'"
complete -c lanes -l junit -d 'Write JUnit XML to FILE when the run ends: a test suite per key, a test case per job' -r -F
complete -c lanes -l results -d 'Also write each job\'s stdout and stderr to files of their own under DIR (created when missing), named from the seq and the escaped key: `000042-KEY.stdout`. A DIR that holds files is refused, so that two runs never mix, unless --results-clean' -r -F
complete -c lanes -s 0 -l null -d 'Records end with a NUL byte instead of a newline (`find -print0`, `xargs -0`), so that arguments and commands may hold newlines'
complete -c lanes -l no-null -d 'Records end with a newline (undoes -0)'
complete -c lanes -l dry-run -d 'Print what would run, per key in order, with its round, slot and batch (as if every job took the same time and succeeded), then exit 0: nothing runs, no report is written'
complete -c lanes -l no-dry-run -d 'Undo --dry-run'
complete -c lanes -l cancel-in-progress -d 'A newer job of a key also interrupts the key\'s running job (superseded), then starts. Implies --coalesce latest'
complete -c lanes -l no-cancel-in-progress -d 'Undo --cancel-in-progress (and a manifest\'s `cancel_in_progress = true`)'
complete -c lanes -l fail-fast -d 'After the first failed job, start nothing more and stop the running jobs'
complete -c lanes -l no-fail-fast -d 'Undo --fail-fast (and a manifest\'s `fail_fast = true`)'
complete -c lanes -l sticky-slots -d 'Bind each key to the slot its first job ran in; later jobs of the key wait for that slot (`LANES_SLOT`), for per-slot resources such as a GPU or a port'
complete -c lanes -l no-sticky-slots -d 'Undo --sticky-slots (and a manifest\'s `sticky_slots = true`)'
complete -c lanes -l strict -d 'Validate the whole input before anything starts; exit 2 on the first invalid line'
complete -c lanes -l no-strict -d 'Undo --strict'
complete -c lanes -l json -d 'Write the JSON Lines report to stdout; all job output then goes to stderr'
complete -c lanes -l no-json -d 'Undo --json'
complete -c lanes -l keep-order -d 'With --output grouped: print the blocks in input order (a block waits for the blocks of earlier jobs)'
complete -c lanes -l no-keep-order -d 'Undo --keep-order'
complete -c lanes -l results-clean -d 'With --results: first remove the files an earlier run wrote in DIR (anything else there is refused)'
complete -c lanes -l no-results-clean -d 'Undo --results-clean'
complete -c lanes -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lanes -s V -l version -d 'Print version'
