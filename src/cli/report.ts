import type { Command } from 'commander';
import { eventsFileFor } from '../core/events.js';
import { writeFileAtomic } from '../core/fs.js';
import { journalFileFor } from '../orchestrator/journal.js';
import { renderHtml } from '../report/html.js';
import { buildReport, type RunReport } from '../report/model.js';
import { readEvents, readJournal } from '../report/read.js';
import { out } from './output.js';

/** The report of a run recorded next to an inventory (its journal and event log). */
export function reportOf(inventoryFile: string, run?: string): RunReport {
  const journalFile = journalFileFor(inventoryFile);
  const journal = readJournal(journalFile);
  const events = readEvents(eventsFileFor(inventoryFile));
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
    .description('write one self-contained HTML page of a deploy or upgrade run (timeline, availability, failures)')
    .requiredOption('-i, --inventory <file>', 'inventory YAML file (its journal and event log are read)')
    .option('--run <id>', 'the run id of the journal (default: the run started last)')
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
