/**
 * The only module that imports `listr2` (CONVENTIONS.md 9): per-item progress
 * for long operations. On a terminal it draws the task list; elsewhere (CI,
 * pipes, --json) it stays silent and the caller prints results and events.
 */
import { Listr } from 'listr2';

/** One unit of work shown as a line of progress. */
export interface ProgressTask {
  readonly title: string;
  /**
   * Resolves to a short result shown next to the title; rejects to mark the
   * line failed. `update` shows where a long task stands meanwhile.
   */
  run(update: (status: string) => void): Promise<string>;
}

/** Run tasks with at most `concurrency` at once; never throws for a failed task. */
export async function runWithProgress(
  tasks: readonly ProgressTask[],
  concurrency: number,
  visible: boolean,
): Promise<void> {
  const list = new Listr(
    tasks.map((t) => ({
      title: t.title,
      task: async (_ctx: unknown, task: { title: string }) => {
        const result = await t.run((status) => (task.title = `${t.title}: ${status}`));
        task.title = `${t.title}: ${result}`;
      },
    })),
    {
      concurrent: Math.max(1, concurrency),
      exitOnError: false,
      renderer: visible ? 'default' : 'silent',
      rendererOptions: { collapseErrors: false },
    },
  );
  await list.run().catch(() => undefined);
}
