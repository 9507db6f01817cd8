//! Stopped processes (SPEC §8): whatever lanes signals to end it hears the signal, because
//! SIGCONT follows. (Ctrl-Z and `fg` in a real terminal are in `terminal.rs`.)

use std::time::Duration;

use crate::support::*;

#[test]
fn a_stopped_process_that_escaped_its_job_hears_its_sigterm() {
    let scratch = Scratch::new();
    // It clears its environment and leaves the session: only the last sweep finds it. It
    // stops itself; on SIGTERM it leaves a mark and exits.
    scratch.write(
        "escapee.sh",
        "trap 'touch \"$D/termed\"; exit 0' TERM\n\
         echo $$ > \"$D/esc.tmp\"; mv \"$D/esc.tmp\" \"$D/esc\"\n\
         kill -STOP $$\n\
         sleep 30\n",
    );
    let out = Run::new()
        .scratch(&scratch)
        .args(["--containment", "process-group", "--grace", "10"])
        .stdin(
            "k\tsetsid env -i D=\"$D\" sh \"$D/escapee.sh\" </dev/null >/dev/null 2>&1 & \
             n=0; until [ -e \"$D/esc\" ] && grep -q '^State:.*T' \"/proc/$(cat \"$D/esc\")/status\"; \
             do n=$((n+1)); [ $n -gt 1000 ] && exit 97; sleep 0.01; done\n",
        )
        .run();
    out.code(0);
    let pid = scratch.pid("esc");
    assert!(
        scratch.exists("termed"),
        "the stopped escapee never heard SIGTERM\n{}",
        out.dump()
    );
    assert!(!alive(pid));
    // Well before the grace period would have run out.
    assert!(out.elapsed < Duration::from_secs(8), "{:?}", out.elapsed);
}
