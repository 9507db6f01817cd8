//! The live display on a terminal (SPEC §5.4): one status line — elapsed, done/total, running,
//! stopped, queued, failed, interrupted, rejected — and one line per running job (key, elapsed, command),
//! drawn on stderr with `indicatif`. Job output is written above it through
//! [`Progress::handle`]'s `suspend`, never through it.
//!
//! Every frame is laid out for the terminal's size at that moment (asked on each frame, and at
//! once after a resize, SIGWINCH): no line is longer than the width less one column, so none
//! wraps, and no more lines are drawn than the height leaves room for; the running jobs left
//! out are counted on a last line (`… and N more running`). While the display is drawn, the
//! terminal does not echo what is typed ([`Echo`]): an echoed `^C` or Enter would move the
//! cursor under the display, which could then not be cleared and would stay in the scrollback.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use console::{measure_text_width, truncate_str};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

use super::terminal::{draw_target, in_background, Echo};

use crate::core::Outcome;

/// The live display. Everything is a no-op once [`Progress::finish`] has run.
///
/// The frame is laid out when it is drawn (ten times a second, and at once after a resize or
/// a stop signal), from the [`Board`] the run keeps up to
/// date, so that elapsed times are those of the moment of drawing. The run changes the board
/// one event at a time and calls [`Progress::settle`] once it has carried out all that an event
/// brings (a job's end, its record, the next job's start): frames show the board as it was
/// then, so that no frame counts a job twice or not at all, and the job lines are the runs the
/// status line counts.
pub(crate) struct Progress {
    /// Handed to writers, which print above the display through it.
    multi: MultiProgress,
    /// The thread that draws: every call into `indicatif` that may write to the terminal.
    painter: Painter,
    board: Arc<Mutex<Board>>,
    /// Echo turned off while the display is drawn, when it was.
    echo: Option<Echo>,
    /// `lanes` is in the background of its terminal (`bg`, `lanes … &`): nothing is drawn, so
    /// that the shell's prompt and what is typed there are not drawn over, until it is in the
    /// foreground again (`fg`; looked at on every [`Progress::tick`]).
    background: bool,
    /// The terminal's echo is left alone (the input is typed there).
    keep_echo: bool,
    finished: bool,
}

/// What the display shows, shared with the thread that draws it.
struct Board {
    /// When the display started: the status line's elapsed time.
    since: Instant,
    /// Every run in flight when the run last settled, by its first job's seq.
    running: BTreeMap<u64, RunLine>,
    /// What happened to the runs' lines since the run last settled, in order.
    pending: Vec<LineChange>,
    /// The counts as the events carried out so far leave them (`running` and `stopped` as
    /// of the last settling).
    counts: Counts,
    /// The counts when the run last settled ([`Progress::settle`]): the status line's.
    shown: Counts,
    phase: Phase,
}

/// The status line's numbers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    /// Jobs with their record.
    done: u64,
    failed: u64,
    interrupted: u64,
    rejected: u64,
    /// Runs in flight, stopped ones included.
    running: usize,
    /// Runs in flight whose processes are stopped.
    stopped: usize,
    queued: usize,
    total: Option<u64>,
}

/// A change to the runs' lines, kept until the run settles.
enum LineChange {
    Started(u64, RunLine),
    Ended(u64),
    Stopping(u64, &'static str),
}

/// One run in flight, as its line shows it.
struct RunLine {
    /// The key, control characters escaped.
    key: String,
    /// The command, control characters as spaces.
    command: String,
    started: Instant,
    /// Why its processes are stopped, when they are (`waiting for terminal input`).
    stopped: Option<&'static str>,
    /// Why lanes is stopping it, once it is (the report's reason: `timeout`, `superseded`…):
    /// its grace period runs.
    stopping: Option<&'static str>,
}

/// What the run is doing, as the status line says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Running,
    /// A stop signal came: running jobs are being stopped.
    Stopping,
    /// A second stop signal came: running jobs are being killed.
    Killing,
}

/// How often [`Progress::spin`] is called.
pub(crate) const SPIN: Duration = Duration::from_millis(100);

/// The most job lines drawn, however tall the terminal.
const MAX_JOB_LINES: usize = 20;

impl Board {
    fn new(since: Instant) -> Self {
        Board {
            since,
            running: BTreeMap::new(),
            pending: Vec::new(),
            counts: Counts::default(),
            shown: Counts::default(),
            phase: Phase::Running,
        }
    }

    /// Everything an event brings is carried out, and `queued` jobs wait: the status line
    /// shows the counts as they are now.
    fn settle(&mut self, queued: usize) {
        for change in std::mem::take(&mut self.pending) {
            match change {
                LineChange::Started(seq, line) => {
                    self.running.insert(seq, line);
                }
                LineChange::Ended(seq) => {
                    let line = self.running.remove(&seq);
                    if line.is_some_and(|line| line.stopped.is_some()) {
                        self.counts.stopped -= 1;
                    }
                }
                LineChange::Stopping(seq, why) => {
                    if let Some(line) = self.running.get_mut(&seq) {
                        line.stopping.get_or_insert(why);
                    }
                }
            }
        }
        self.counts.queued = queued;
        self.counts.running = self.running.len();
        self.shown = self.counts;
    }

    /// The frame to draw at `now`, for the terminal's size.
    fn draw(&self, now: Instant) -> String {
        let (rows, columns) = console::Term::stderr().size_checked().unwrap_or((24, 80));
        frame(self, now, usize::from(rows), usize::from(columns))
    }
}

impl Progress {
    /// A display on stderr. `keep_echo`: the terminal's echo is left on (someone types the
    /// input on that terminal).
    pub(crate) fn new(keep_echo: bool) -> Self {
        let multi = MultiProgress::with_draw_target(draw_target());
        multi.set_move_cursor(true);
        let board = Arc::new(Mutex::new(Board::new(Instant::now())));
        let frame = multi.add(ProgressBar::new_spinner());
        let drawn = Arc::clone(&board);
        frame.set_style(
            // The colours a job's output left set are reset first: the frame is drawn in the
            // terminal's own.
            ProgressStyle::with_template("\x1b[0m{spinner} {frame}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner())
                .with_key(
                    "frame",
                    move |_: &ProgressState, out: &mut dyn std::fmt::Write| {
                        let board = drawn.lock().unwrap_or_else(PoisonError::into_inner);
                        let _ = out.write_str(&board.draw(Instant::now()));
                    },
                ),
        );
        let background = in_background();
        if background {
            multi.set_draw_target(ProgressDrawTarget::hidden());
        }
        Progress {
            painter: Painter::start(multi.clone(), frame),
            multi,
            board,
            echo: (!keep_echo).then(Echo::off).flatten(),
            background,
            keep_echo,
            finished: false,
        }
    }

    /// The handle writers use to print above the display (`suspend`).
    pub(crate) fn handle(&self) -> MultiProgress {
        self.multi.clone()
    }

    /// The board, to change it; the frames drawn meanwhile show it as it last settled.
    fn change(&self) -> MutexGuard<'_, Board> {
        self.board.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An event has been carried out whole, and `queued` jobs wait now: the frames drawn from
    /// now on show the board as it is now.
    pub(crate) fn settle(&mut self, queued: usize) {
        self.change().settle(queued);
    }

    /// The number of jobs in all, once the input has ended.
    pub(crate) fn set_total(&mut self, total: u64) {
        self.change().counts.total = Some(total);
    }

    /// A run started (a job, or a batch known by its first job's seq).
    pub(crate) fn started(&mut self, seq: u64, key: &str, command: &str) {
        let line = RunLine {
            key: crate::output::framing::escape_controls(key),
            command: command
                .chars()
                .map(|c| {
                    if crate::output::framing::is_hidden(c) {
                        ' '
                    } else {
                        c
                    }
                })
                .collect(),
            started: Instant::now(),
            stopped: None,
            stopping: None,
        };
        self.change().pending.push(LineChange::Started(seq, line));
    }

    /// A run (known by its first job's seq) ended; its line goes.
    pub(crate) fn run_ended(&mut self, seq: u64) {
        self.change().pending.push(LineChange::Ended(seq));
    }

    /// A job's record was written with `outcome`.
    pub(crate) fn recorded(&mut self, outcome: Outcome) {
        let counts = &mut self.change().counts;
        counts.done += 1;
        // As the summary counts them.
        match outcome {
            Outcome::Rejected(_) => counts.rejected += 1,
            Outcome::Failed(_) => counts.failed += 1,
            Outcome::Interrupted(_) => counts.interrupted += 1,
            Outcome::Succeeded | Outcome::Skipped(_) => {}
        }
    }

    /// lanes is stopping the run `seq` (its first job), for `why` (the report's reason): its
    /// line says so until it has ended.
    pub(crate) fn stopping_run(&mut self, seq: u64, why: &'static str) {
        self.change().pending.push(LineChange::Stopping(seq, why));
    }

    /// Which runs in flight are stopped now, and why (by first seq); the others are not.
    /// Called between events: the run is settled.
    pub(crate) fn set_stopped(&mut self, stopped: &HashMap<u64, &'static str>) {
        let mut changed = false;
        {
            let mut board = self.change();
            let queued = board.counts.queued;
            board.settle(queued);
            let mut count = 0;
            for (seq, line) in &mut board.running {
                let now = stopped.get(seq).copied();
                changed |= now != line.stopped;
                line.stopped = now;
                count += usize::from(now.is_some());
            }
            board.counts.stopped = count;
            // Seen by the user at once, with the counts as they are.
            if changed {
                let queued = board.counts.queued;
                board.settle(queued);
            }
        }
        if changed {
            self.draw_now();
        }
    }

    /// Looks whether `lanes` is in the background of its terminal (once a second): hides the
    /// display while it is, and draws it afresh once it is in the foreground again.
    pub(crate) fn tick(&mut self) {
        if self.finished {
            return;
        }
        let background = in_background();
        if background && !self.background {
            self.background = true;
            self.painter.order(Paint::Hide);
            // The shell that took the terminal sets its own settings: nothing to give back.
            self.echo = None;
        } else if !background && self.background {
            self.background = false;
            self.show();
        }
    }

    /// `lanes` was continued (SIGCONT). After a stop it could not see coming (SIGSTOP) and
    /// `fg`, the shell has had the terminal: echo is on again, and the shell's lines are where
    /// the frame was. Then the frame starts afresh below them, without echo. A SIGCONT that
    /// did not follow such a stop, or that followed a Ctrl-Z (whose return already drew the
    /// display afresh), finds echo still off and changes nothing; in the background the next
    /// [`Progress::tick`] hides the display.
    pub(crate) fn continued(&mut self) {
        if self.finished || self.background {
            return;
        }
        // Continued in the background (`kill -CONT` without `fg`): hidden at once.
        if in_background() {
            self.tick();
            return;
        }
        if self.echo.as_ref().is_some_and(Echo::turned_back_on) {
            // A frame drawn now would be drawn over the shell's lines.
            self.echo = None;
            self.show();
        }
    }

    /// Draws the next frame, the spinner moved on: called ten times a second ([`SPIN`]) by
    /// the event loop, which draws every frame, so that none is drawn while the loop has yet
    /// to hear of a stop and continue ([`Progress::continued`]).
    pub(crate) fn spin(&mut self) {
        // SIGCONT may not have been heard yet: the terminal tells.
        self.continued();
        if !self.finished && !self.background {
            self.painter.order(Paint::Tick);
        }
    }

    /// The terminal's size changed (SIGWINCH): the display is laid out again at once.
    pub(crate) fn resized(&mut self) {
        self.draw_now();
    }

    /// A stop signal came: the status line says that the running jobs are being stopped until
    /// they are gone.
    pub(crate) fn stopping(&mut self) {
        self.enter(Phase::Stopping);
    }

    /// A second stop signal came: the running jobs are being killed.
    pub(crate) fn killing(&mut self) {
        self.enter(Phase::Killing);
    }

    /// The run goes on to `phase` (never back), and the status line says so at once.
    fn enter(&mut self, phase: Phase) {
        {
            let mut board = self.board.lock().unwrap_or_else(PoisonError::into_inner);
            if board.phase == Phase::Killing || board.phase == phase {
                return;
            }
            board.phase = phase;
        }
        self.draw_now();
    }

    /// Draws the frame now, not at the next tick (unless the display is hidden or finished).
    fn draw_now(&mut self) {
        self.continued();
        if !self.finished {
            self.painter.order(Paint::Draw);
        }
    }

    /// `lanes` is about to stop (Ctrl-Z): the display is cleared and the terminal's echo given
    /// back, so that the shell finds its terminal as it left it.
    pub(crate) fn pause(&mut self) {
        if self.finished {
            return;
        }
        self.painter.order(Paint::Clear);
        self.painter.order(Paint::Hide);
        // Cleared before lanes stops, unless the terminal takes nothing now (Ctrl-S).
        self.painter.wait_done(Some(PAUSE_PATIENCE));
        if let Some(echo) = self.echo.take() {
            echo.restore();
        }
    }

    /// `lanes` goes on after [`Progress::pause`]: after `fg`, the display is drawn afresh,
    /// without echo again; after `bg`, nothing is drawn until `lanes` is in the foreground
    /// again ([`Progress::tick`]).
    pub(crate) fn resume(&mut self) {
        if self.finished {
            return;
        }
        self.background = in_background();
        if !self.background {
            self.show();
        }
    }

    /// Draws the display on the terminal again, without echo unless it is kept.
    fn show(&mut self) {
        if !self.keep_echo && self.echo.is_none() {
            self.echo = Echo::off();
        }
        self.painter.order(Paint::Show);
        self.draw_now();
    }

    /// Clears the display for good, and gives the terminal its echo back.
    pub(crate) fn finish(&mut self) {
        if self.order_finish() {
            // What is written after (the summary) comes below the cleared display.
            self.painter.wait_done(None);
        }
        if let Some(echo) = self.echo.take() {
            echo.restore();
        }
    }

    /// Orders the display cleared for good, once: whether this call ordered it.
    fn order_finish(&mut self) -> bool {
        let first = !self.finished;
        if first {
            self.finished = true;
            self.painter.order(Paint::Finish);
        }
        first
    }

    /// Orders the display cleared for good, as [`Progress::finish`] does; returns when it is.
    /// A terminal that takes nothing (Ctrl-S, a stalled ssh session) holds the display's
    /// thread in a write, and this wait with it: the caller waits for it as for any reader of
    /// lanes' output, and may give up on it. [`Progress::finish`] then only gives the echo
    /// back.
    pub(crate) fn finish_later(&mut self) -> impl std::future::Future<Output = ()> + 'static {
        self.order_finish();
        let shared = Arc::clone(&self.painter.shared);
        async move {
            let painter = Painter { shared };
            // Most often done at once; else looked at 50 times a second.
            while !painter.wait_done(Some(Duration::from_millis(5))) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(echo) = self.echo.take() {
            echo.restore();
        }
        self.painter.close();
    }
}

/// How long [`Progress::pause`] waits for the display to be cleared before lanes stops.
const PAUSE_PATIENCE: Duration = Duration::from_secs(1);

/// What the display thread does, in the order asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Paint {
    /// The next frame, when one is due (at most [`REFRESH_HZ`](super::terminal) a second).
    Tick,
    /// A frame now.
    Draw,
    /// Nothing drawn from now on.
    Hide,
    /// Drawn on the terminal again.
    Show,
    /// The frame cleared.
    Clear,
    /// The frame cleared for good; writers then write plainly.
    Finish,
}

/// The thread that draws the display. A terminal that takes nothing (Ctrl-S, a stalled ssh
/// session) blocks a write to it, and `indicatif` holds its lock meanwhile, as writers do that
/// print above the display: only this thread then waits, while the event loop goes on
/// supervising (timeouts, stops, exits, starts). Orders are kept in order; frames asked for
/// while one waits to be drawn are drawn once.
struct Painter {
    shared: Arc<(Mutex<Orders>, std::sync::Condvar)>,
}

#[derive(Default)]
struct Orders {
    queue: std::collections::VecDeque<Paint>,
    /// The thread is carrying out an order.
    busy: bool,
    /// No order comes any more: the thread ends.
    closed: bool,
}

impl Painter {
    /// Starts the thread drawing `frame` through `multi`. Without a thread (none could be
    /// started), orders are carried out by the caller.
    fn start(multi: MultiProgress, frame: ProgressBar) -> Self {
        let shared = Arc::new((Mutex::new(Orders::default()), std::sync::Condvar::new()));
        let theirs = Arc::clone(&shared);
        let started = std::thread::Builder::new()
            .name("lanes-display".into())
            .spawn(move || paint(&theirs, &multi, &frame));
        if started.is_err() {
            // Orders then wait for ever: none is drawn, the run goes on.
            let (orders, _) = &*shared;
            lock(orders).closed = true;
        }
        Painter { shared }
    }

    /// Asks for `paint` after the orders before it.
    fn order(&self, paint: Paint) {
        let (orders, wake) = &*self.shared;
        let mut orders = lock(orders);
        if orders.closed {
            return;
        }
        match (orders.queue.back().copied(), paint) {
            // A frame already asked for and not drawn yet shows the board as it is then.
            (Some(Paint::Tick | Paint::Draw), Paint::Tick) | (Some(Paint::Draw), Paint::Draw) => {
                return
            }
            (Some(Paint::Tick), Paint::Draw) => {
                orders.queue.pop_back();
            }
            _ => {}
        }
        orders.queue.push_back(paint);
        wake.notify_all();
    }

    /// Waits until every order is carried out, at most `patience` when given; whether they
    /// are.
    fn wait_done(&self, patience: Option<Duration>) -> bool {
        let (orders, done) = &*self.shared;
        let deadline = patience.map(|patience| Instant::now() + patience);
        let mut orders = lock(orders);
        while !orders.closed && (orders.busy || !orders.queue.is_empty()) {
            orders = match deadline {
                None => done.wait(orders).unwrap_or_else(PoisonError::into_inner),
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return false;
                    }
                    done.wait_timeout(orders, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
        true
    }

    /// No order comes any more: the thread ends once it has carried out those asked.
    fn close(&self) {
        let (orders, wake) = &*self.shared;
        lock(orders).closed = true;
        wake.notify_all();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The display thread's loop: carries out each order, then says so.
fn paint(shared: &(Mutex<Orders>, std::sync::Condvar), multi: &MultiProgress, frame: &ProgressBar) {
    let (orders, wake) = shared;
    loop {
        let next = {
            let mut orders = lock(orders);
            loop {
                if let Some(next) = orders.queue.pop_front() {
                    orders.busy = true;
                    break next;
                }
                if orders.closed {
                    return;
                }
                orders = wake.wait(orders).unwrap_or_else(PoisonError::into_inner);
            }
        };
        match next {
            Paint::Tick => frame.tick(),
            Paint::Draw => frame.force_draw(),
            Paint::Hide => multi.set_draw_target(ProgressDrawTarget::hidden()),
            Paint::Show => {
                multi.set_draw_target(draw_target());
                multi.set_move_cursor(true);
            }
            Paint::Clear => {
                let _ = multi.clear();
            }
            Paint::Finish => {
                frame.finish_and_clear();
                let _ = multi.clear();
                // Writers still hold the handle: from now on they write plainly, nothing is
                // redrawn.
                multi.set_draw_target(ProgressDrawTarget::hidden());
            }
        }
        lock(orders).busy = false;
        wake.notify_all();
    }
}

/// The narrowest terminal that gets more than the spinner (2 columns, and the last column
/// left free).
const MIN_COLUMNS: usize = 4;

/// The frame's text for a terminal of `rows` × `columns`: the status line (after the
/// spinner, which takes 2 columns), the job lines, stopped jobs first, then by seq, and how
/// many running jobs are not shown. No line is wider than `columns - 1`.
fn frame(board: &Board, now: Instant, rows: usize, columns: usize) -> String {
    let width = columns.saturating_sub(1);
    let elapsed = clock(now.saturating_duration_since(board.since));
    let counts = &board.shown;
    let (running, stopped) = (counts.running, counts.stopped);
    let mut status = match board.phase {
        // Once no job runs, what is left is processes that escaped their jobs and output.
        Phase::Stopping | Phase::Killing if running == 0 => format!("{elapsed} stopping…"),
        Phase::Stopping => format!(
            "{elapsed} stopping {running} job{}… (Ctrl-C again to kill)",
            plural(running)
        ),
        Phase::Killing => format!("{elapsed} killing {running} job{}…", plural(running)),
        Phase::Running => {
            let mut status = match counts.total {
                Some(total) => format!("{elapsed} {}/{total} done", counts.done),
                None => format!("{elapsed} {} done", counts.done),
            };
            // Separate buckets: a stopped job is counted as stopped, not also as running.
            let _ = write!(status, " · {} running", running - stopped);
            if stopped > 0 {
                let _ = write!(status, " · {stopped} stopped");
            }
            let _ = write!(
                status,
                " · {} queued · {} failed",
                counts.queued, counts.failed
            );
            if counts.interrupted > 0 {
                let _ = write!(status, " · {} interrupted", counts.interrupted);
            }
            if counts.rejected > 0 {
                let _ = write!(status, " · {} rejected", counts.rejected);
            }
            status
        }
    };
    status = fit(&status, width.saturating_sub(2));
    if columns < MIN_COLUMNS {
        // No room for a line but the spinner's: a job line would be `…` alone.
        return status;
    }
    // Rows left for job lines: two rows of the terminal stay free for what is written above,
    // but a terminal of two or three rows still gets one, for the count at least.
    let job_rows = match rows {
        0 | 1 => 0,
        _ => rows.saturating_sub(3).clamp(1, MAX_JOB_LINES),
    };
    let lines = board.running.len();
    let shown = if lines <= job_rows {
        lines
    } else {
        job_rows.saturating_sub(1)
    };
    let mut order: Vec<&RunLine> = board.running.values().collect();
    order.sort_by_key(|line| line.stopped.is_none());
    let mut text = status;
    for line in order.into_iter().take(shown) {
        text.push('\n');
        text.push_str(&job_line(line, now, width));
    }
    let hidden = lines - shown;
    if hidden > 0 && job_rows > 0 {
        text.push('\n');
        text.push_str(&fit(&format!("  … and {hidden} more running"), width));
    }
    text
}

/// One job's line, at most `width` columns: `  [key]  12s command`,
/// `  [key]  12s STOPPED (why): command` while its processes are stopped, or
/// `  [key]  12s stopping (timeout): command` while lanes stops it. Long keys are cut to a
/// third of the width.
fn job_line(line: &RunLine, now: Instant, width: usize) -> String {
    let most = (width / 3).max(8);
    let key = truncate_str(&line.key, most, "…");
    let secs = now.saturating_duration_since(line.started).as_secs();
    let mut text = format!("  [{key}] {secs:>3}s ");
    if let Some(why) = line.stopped {
        let _ = write!(text, "STOPPED ({why}): ");
    } else if let Some(why) = line.stopping {
        let _ = write!(text, "stopping ({why}): ");
    }
    text.push_str(&line.command);
    fit(&text, width)
}

/// `text` cut to `width` columns, ending in `…` when cut.
fn fit(text: &str, width: usize) -> String {
    if width == 0 {
        // Not even the `…`.
        return String::new();
    }
    if measure_text_width(text) <= width {
        text.to_owned()
    } else {
        truncate_str(text, width, "…").into_owned()
    }
}

/// `HH:MM:SS`.
fn clock(elapsed: Duration) -> String {
    let secs = elapsed.as_secs();
    format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn board_with(jobs: usize) -> Board {
        let now = Instant::now();
        let mut board = Board::new(now);
        board.running = (0..jobs as u64)
            .map(|seq| {
                (
                    seq,
                    RunLine {
                        key: format!("key-{seq}"),
                        command: "a rather long command line ".repeat(4),
                        started: now,
                        stopped: (seq == 3).then_some("waiting for terminal input"),
                        stopping: None,
                    },
                )
            })
            .collect();
        board.counts.stopped = usize::from(jobs > 3);
        (
            board.counts.done,
            board.counts.failed,
            board.counts.rejected,
        ) = (2, 1, 1);
        board.counts.total = Some(20);
        board.settle(5);
        board
    }

    /// A display drawn nowhere, on `board`.
    fn hidden(board: Board) -> Progress {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::hidden());
        let frame = multi.add(ProgressBar::hidden());
        Progress {
            painter: Painter::start(multi.clone(), frame),
            multi,
            board: Arc::new(Mutex::new(board)),
            echo: None,
            background: false,
            keep_echo: true,
            finished: false,
        }
    }

    fn drawn(progress: &Progress) -> String {
        let board = progress.board.lock().unwrap();
        board.draw(board.since)
    }

    #[test]
    fn no_line_is_wider_than_the_terminal_less_a_column() {
        let board = board_with(4);
        for columns in [10, 20, 33, 80] {
            let text = frame(&board, board.since, 24, columns);
            let mut lines = text.lines();
            // The status line follows the 2-column spinner.
            assert!(measure_text_width(lines.next().unwrap()) + 2 < columns.max(4));
            for line in lines {
                assert!(measure_text_width(line) < columns, "{line:?} at {columns}");
            }
        }
    }

    #[test]
    fn a_terminal_narrower_than_four_columns_gets_the_spinner_alone() {
        let board = board_with(4);
        for columns in 0..MIN_COLUMNS {
            let text = frame(&board, board.since, 24, columns);
            assert_eq!(text, "", "at {columns} columns");
        }
        assert!(frame(&board, board.since, 24, MIN_COLUMNS).contains('\n'));
    }

    #[test]
    fn a_short_terminal_counts_the_running_jobs_not_shown() {
        let board = board_with(10);
        let text = frame(&board, board.since, 8, 120);
        let lines: Vec<&str> = text.lines().collect();
        // 8 rows: 5 for jobs: 4 jobs and the count of the other 6.
        assert_eq!(lines.len(), 6, "{text}");
        assert_eq!(lines[5], "  … and 6 more running");
        // The stopped job comes first, and says why.
        assert!(
            lines[1].contains("[key-3]")
                && lines[1].contains("STOPPED (waiting for terminal input)")
        );
        assert!(lines[0].contains("9 running · 1 stopped · 5 queued · 1 failed · 1 rejected"));
        // 3 rows: the status line and the count.
        let tiny = frame(&board, board.since, 3, 120);
        assert_eq!(
            tiny.lines().nth(1),
            Some("  … and 10 more running"),
            "{tiny}"
        );
        assert_eq!(tiny.lines().count(), 2);
        let all = frame(&board, board.since, 40, 80);
        assert_eq!(all.lines().count(), 11, "{all}");
        assert!(!all.contains("more running"));
    }

    #[test]
    fn failed_interrupted_and_rejected_jobs_are_counted_as_the_summary_counts_them() {
        use crate::core::{FailReason, RejectReason, StopReason};
        let mut board = board_with(0);
        board.counts = Counts::default();
        let mut progress = hidden(board);
        progress.recorded(Outcome::Rejected(RejectReason::InvalidInput));
        progress.recorded(Outcome::Rejected(RejectReason::QueueFull));
        progress.recorded(Outcome::Failed(FailReason::ExitStatus));
        progress.recorded(Outcome::Interrupted(StopReason::Superseded));
        progress.recorded(Outcome::Interrupted(StopReason::Timeout));
        progress.recorded(Outcome::Interrupted(StopReason::Timeout));
        progress.recorded(Outcome::Succeeded);
        progress.recorded(Outcome::Skipped(crate::core::SkipReason::SucceededBefore));
        progress.settle(5);
        let board = progress.board.lock().unwrap();
        let counts = board.shown;
        assert_eq!(
            (
                counts.done,
                counts.failed,
                counts.interrupted,
                counts.rejected
            ),
            (8, 1, 3, 2)
        );
        let text = frame(&board, board.since, 24, 120);
        assert!(
            text.contains("· 1 failed · 3 interrupted · 2 rejected"),
            "{text}"
        );
    }

    #[test]
    fn a_frame_shows_an_event_only_once_it_is_carried_out_whole() {
        let mut board = board_with(2);
        board.counts = Counts {
            total: Some(3),
            ..Counts::default()
        };
        board.settle(1);
        let mut progress = hidden(board);
        let before = drawn(&progress);
        assert!(
            before.contains("0/3 done · 2 running · 1 queued"),
            "{before}"
        );
        // A job ends and has its record, and the queued job starts: the frame waits for all
        // three.
        progress.run_ended(0);
        assert_eq!(drawn(&progress), before);
        progress.recorded(Outcome::Succeeded);
        assert_eq!(drawn(&progress), before);
        progress.started(2, "key-2", "true");
        assert_eq!(drawn(&progress), before);
        progress.settle(0);
        let after = drawn(&progress);
        assert!(after.contains("1/3 done · 2 running · 0 queued"), "{after}");
        // Its job lines are the two the status line counts.
        assert!(
            !after.contains("[key-0]") && after.contains("[key-1]") && after.contains("[key-2]")
        );
    }

    #[test]
    fn a_job_line_says_how_long_the_job_has_run_when_it_is_drawn() {
        let board = board_with(1);
        let since = board.since;
        let text = board.draw(since + Duration::from_millis(2_500));
        assert!(text.contains("[key-0]   2s "), "{text}");
        let text = board.draw(since + Duration::from_secs(61));
        assert!(text.starts_with("00:01:01 "), "{text}");
        assert!(text.contains("[key-0]  61s "), "{text}");
    }

    #[test]
    fn a_job_being_stopped_says_why_until_it_ends() {
        let mut progress = hidden(board_with(2));
        progress.stopping_run(1, "timeout");
        // A later order does not change why.
        progress.stopping_run(1, "shutdown");
        progress.settle(5);
        let text = drawn(&progress);
        let line = text.lines().find(|l| l.contains("[key-1]")).unwrap();
        assert!(line.contains("stopping (timeout): a rather"), "{text}");
        assert!(!text
            .lines()
            .any(|l| l.contains("[key-0]") && l.contains("stopping")));
        progress.run_ended(1);
        progress.stopping_run(1, "timeout");
        progress.settle(5);
        assert!(!drawn(&progress).contains("[key-1]"));
    }

    #[test]
    fn stopping_says_how_many_jobs_are_left() {
        let mut board = board_with(3);
        board.phase = Phase::Stopping;
        let text = frame(&board, board.since, 24, 80);
        assert!(
            text.starts_with("00:00:00 stopping 3 jobs… (Ctrl-C again to kill)"),
            "{text}"
        );
    }
}
