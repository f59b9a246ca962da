/**
 * Watching one guest from outside while something is done to it (a live migration, an upgrade's
 * batch). The guest image stackctl builds serves `/cgi-bin/state`: its kernel's boot id and a
 * counter that advances every 100 ms in memory (images/guest/init). Polled at a fixed interval, the
 * answers say what the guest went through: answers lost, the longest time without one (the
 * dataplane gap a user saw), a boot id that changed (a reboot, or a guest restarted from its disk:
 * its memory was lost) and a counter that went back (the same, seen another way).
 *
 * summarize() is pure: the samples in, the figures out. watchGuest() polls with fetch until
 * stopped.
 */

/** The state page's one line: `boot_id=UUID counter=N uptime=S`. */
const STATE_LINE = /^boot_id=([0-9a-f-]{36}) counter=(\d+) uptime=[\d.]+$/m;

/** What one poll saw. */
export interface GuestSample {
  /** Milliseconds since the epoch, when the request was sent. */
  readonly at: number;
  /** The guest answered with a well-formed state line. */
  readonly ok: boolean;
  readonly bootId?: string;
  readonly counter?: number;
}

/** The figures of one watch. */
export interface GuestWatchSummary {
  /** When the watch began (the first poll; ms since the epoch) and ended. */
  readonly from: number;
  readonly to: number;
  readonly samples: number;
  readonly answered: number;
  readonly lost: number;
  /**
   * The longest time (ms) between two answers, or from the last answer to the end of the watch:
   * how long a user of the guest saw nothing. 0 with fewer than one answer.
   */
  readonly longestGapMs: number;
  /** When that gap began (ms since the epoch); undefined when nothing was answered. */
  readonly longestGapFrom?: number;
  /** Every boot id seen, in order of first appearance. */
  readonly bootIds: readonly string[];
  /** Times the boot id differed from the answer before it: must be 0 for a live migration. */
  readonly bootIdChanges: number;
  /** Times the counter was lower than in the answer before it (with the same boot id). */
  readonly counterRegressions: number;
  readonly firstCounter?: number;
  readonly lastCounter?: number;
}

/** The boot id and counter of a state page, or undefined when the text is not one. */
export function parseGuestState(text: string): { bootId: string; counter: number } | undefined {
  const m = STATE_LINE.exec(text);
  return m ? { bootId: m[1]!, counter: Number(m[2]) } : undefined;
}

/** The figures of `samples` (in the order taken); `endedAt` closes a gap still open at the end. */
export function summarize(samples: readonly GuestSample[], endedAt: number): GuestWatchSummary {
  const answers = samples.filter((s) => s.ok);
  let longestGapMs = 0;
  let longestGapFrom: number | undefined;
  let bootIdChanges = 0;
  let counterRegressions = 0;
  const bootIds: string[] = [];
  answers.forEach((s, i) => {
    if (s.bootId !== undefined && !bootIds.includes(s.bootId)) bootIds.push(s.bootId);
    const prev = answers[i - 1];
    if (!prev) return;
    if (s.at - prev.at > longestGapMs) {
      longestGapMs = s.at - prev.at;
      longestGapFrom = prev.at;
    }
    if (prev.bootId !== s.bootId) bootIdChanges++;
    else if ((s.counter ?? 0) < (prev.counter ?? 0)) counterRegressions++;
  });
  const last = answers[answers.length - 1];
  if (last && endedAt - last.at > longestGapMs) {
    longestGapMs = endedAt - last.at;
    longestGapFrom = last.at;
  }
  return {
    from: samples[0]?.at ?? endedAt,
    to: endedAt,
    samples: samples.length,
    answered: answers.length,
    lost: samples.length - answers.length,
    longestGapMs,
    ...(longestGapFrom !== undefined ? { longestGapFrom } : {}),
    bootIds,
    bootIdChanges,
    counterRegressions,
    ...(answers[0]?.counter !== undefined ? { firstCounter: answers[0].counter } : {}),
    ...(last?.counter !== undefined ? { lastCounter: last.counter } : {}),
  };
}

/** A named span of time (a run's phase, ms since the epoch). */
export interface Span {
  readonly name: string;
  readonly from: number;
  readonly to: number;
}

/** What one watch saw during one span. */
export interface SpanGaps {
  readonly name: string;
  /** Polls sent inside the span, and those unanswered. */
  readonly samples: number;
  readonly lost: number;
  /**
   * The longest time between two answers (ms) among those overlapping the span: a silence that
   * began before the span and ended in it counts for it too.
   */
  readonly longestGapMs: number;
}

/** A watch's samples cut by spans (an upgrade's phases): per span, the polls, losses and longest silence. */
export function gapsBySpan(samples: readonly GuestSample[], spans: readonly Span[]): SpanGaps[] {
  const answers = samples.filter((s) => s.ok);
  return spans.map((span) => {
    const inside = samples.filter((s) => s.at >= span.from && s.at <= span.to);
    let longestGapMs = 0;
    for (let i = 1; i < answers.length; i++) {
      const [a, b] = [answers[i - 1]!.at, answers[i]!.at];
      if (b >= span.from && a <= span.to) longestGapMs = Math.max(longestGapMs, b - a);
    }
    return {
      name: span.name,
      samples: inside.length,
      lost: inside.filter((s) => !s.ok).length,
      longestGapMs,
    };
  });
}

/** How watchGuest polls. */
export interface GuestWatchOptions {
  /** Time between two requests' starts (ms); default 100, the guest counter's own period. */
  readonly intervalMs?: number;
  /** A request unanswered after this long (ms) counts as lost; default 1000. */
  readonly timeoutMs?: number;
}

/** A watch in progress. */
export interface GuestWatch {
  /** What was seen so far (a copy). */
  samples(): GuestSample[];
  /** Stop polling (the request in flight is waited for) and sum up. */
  stop(): Promise<GuestWatchSummary>;
}

/**
 * Poll `url` (a guest's `http://ADDRESS/cgi-bin/state`) every `intervalMs` until stop(). A poll
 * whose answer is late, refused or not a state line is a lost sample; polls never overlap.
 */
export function watchGuest(url: string, options: GuestWatchOptions = {}): GuestWatch {
  const intervalMs = options.intervalMs ?? 100;
  const timeoutMs = options.timeoutMs ?? 1000;
  const samples: GuestSample[] = [];
  let stopped = false;
  const poll = async (): Promise<GuestSample> => {
    const at = Date.now();
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
      const state = parseGuestState(await res.text());
      return state && res.ok ? { at, ok: true, ...state } : { at, ok: false };
    } catch {
      return { at, ok: false };
    }
  };
  const loop = (async () => {
    while (!stopped) {
      const sample = await poll();
      samples.push(sample);
      const wait = sample.at + intervalMs - Date.now();
      if (wait > 0 && !stopped) await new Promise((r) => setTimeout(r, wait));
    }
  })();
  return {
    samples: () => [...samples],
    async stop() {
      stopped = true;
      await loop;
      return summarize(samples, Date.now());
    },
  };
}
