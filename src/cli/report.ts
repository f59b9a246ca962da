import { existsSync } from 'node:fs';
import type { Command } from 'commander';
import { eventsFileFor } from '../core/events.js';
import { writeFileAtomic } from '../core/fs.js';
import { journalFileFor, type JournalRecord } from '../orchestrator/journal.js';
import { renderHtml } from '../report/html.js';
import { buildReport, listRuns, type RunReport } from '../report/model.js';
import { readEvents, readJournal, type Lines } from '../report/read.js';
import { out } from './output.js';

/** The report of a run recorded next to an inventory (its journal and event log). */
export function reportOf(inventoryFile: string, run?: string): RunReport {
  const journalFile = journalFileFor(inventoryFile);
  const eventsFile = eventsFileFor(inventoryFile);
  let journal: Lines<JournalRecord>;
  try {
    journal = readJournal(journalFile);
  } catch (err) {
    // a cloud's maintenance runs are in its event log alone: no journal is needed to report them
    if (!existsSync(eventsFile) || !listRuns([], readEvents(eventsFile).records).length) throw err;
    journal = { records: [], notes: [] };
  }
  const events = readEvents(eventsFile);
  return buildReport(journal.records, events.records, {
    ...(run !== undefined ? { run } : {}),
    inventory: inventoryFile,
    journalFile,
    notes: [...journal.notes, ...events.notes],
  });
}

/**
 * `stackctl report`: one self-contained HTML page of a deploy or upgrade run, from the journal and
 * the event log next to the inventory. Reads nothing else (no inventory parsing, no node contact).
 */
export function registerReport(program: Command): void {
  program
    .command('report')
    .description(
      'write one self-contained HTML page of a deploy, upgrade or maintenance run (timeline, availability, failures)',
    )
    .requiredOption('-i, --inventory <file>', 'inventory YAML file (its journal and event log are read)')
    .option('--run <id>', "the run's id: the journal's, or maintenance-on|off@TIME (default: the run started last)")
    .option('-o, --output <file>', 'where to write the page (default: <inventory>.report.html next to the inventory)')
    .action((opts: { inventory: string; run?: string; output?: string }) => {
      const report = reportOf(opts.inventory, opts.run);
      const file = opts.output ?? opts.inventory.replace(/\.ya?ml$/, '') + '.report.html';
      writeFileAtomic(file, renderHtml(report));
      out(
        `${file}: ${report.command} run ${report.run}, ${report.outcome}, ${report.phases.length} phase(s), ` +
          `${report.failures.length} failure(s)\n`,
      );
    });
}
