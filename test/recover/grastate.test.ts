/** What a Galera member's disk says: grastate.dat, --wsrep-recover's log, the volume report, and "holds data". */
import { describe, expect, it } from 'vitest';
import {
  NIL_UUID,
  holdsData,
  parseGrastate,
  parseRecoveredPosition,
  parseVolumeReport,
  type VolumeReport,
} from '../../src/recover/grastate.js';

const UUID = 'a9fd4cf2-e8e3-11f1-a695-defe4cd7f62f';

describe('parseGrastate', () => {
  it('reads a crashed member (seqno -1), a clean shutdown and Galera safe_to_bootstrap mark', () => {
    const crashed = `# GALERA saved state\nversion: 2.1\nuuid:    ${UUID}\nseqno:   -1\nsafe_to_bootstrap: 0\n`;
    expect(parseGrastate(crashed)).toEqual({ uuid: UUID, seqno: -1, safeToBootstrap: false });
    const clean = `# GALERA saved state\nversion: 2.1\nuuid:    ${UUID}\nseqno:   1234\nsafe_to_bootstrap: 1\n`;
    expect(parseGrastate(clean)).toEqual({ uuid: UUID, seqno: 1234, safeToBootstrap: true });
  });

  it('leaves out what is missing or malformed instead of guessing', () => {
    expect(parseGrastate('')).toEqual({});
    expect(parseGrastate('uuid: not-a-uuid\nseqno: x\nsafe_to_bootstrap: 2\n')).toEqual({});
  });
});

describe('parseRecoveredPosition', () => {
  it('takes the last position mariadbd --wsrep-recover logged', () => {
    const log = [
      '2026-11-25 15:30:01 0 [Note] InnoDB: Starting crash recovery from checkpoint LSN=54815',
      `2026-11-25 15:30:02 0 [Note] WSREP: Recovered position: ${NIL_UUID}:-1`,
      `2026-11-25 15:30:02 0 [Note] WSREP: Recovered position: ${UUID}:15`,
    ].join('\n');
    expect(parseRecoveredPosition(log)).toEqual({ uuid: UUID, seqno: 15 });
    expect(parseRecoveredPosition('[ERROR] InnoDB: Unable to lock ./ibdata1 error: 11')).toBeUndefined();
  });
});

describe('parseVolumeReport and holdsData', () => {
  it('reads the shell report of a volume', () => {
    const r = parseVolumeReport(
      `volume: present\ngrastate: # GALERA saved state\ngrastate: uuid:    ${UUID}\ngrastate: seqno:   -1\n` +
        'gvwstate: present\nschema: drill\nschema: mysql\n',
    );
    expect(r).toEqual({
      volume: true,
      grastate: { uuid: UUID, seqno: -1 },
      gvwstate: true,
      schemas: ['drill', 'mysql'],
    });
  });

  const scenarios: { scenario: string; report: VolumeReport; data: boolean }[] = [
    { scenario: 'no volume at all', report: { volume: false, gvwstate: false, schemas: [] }, data: false },
    {
      scenario: 'a volume the image just initialised (system schemas only)',
      report: { volume: true, gvwstate: false, schemas: ['mysql', 'performance_schema', 'sys'] },
      data: false,
    },
    {
      scenario: 'a cluster UUID in grastate.dat',
      report: { volume: true, grastate: { uuid: UUID, seqno: -1 }, gvwstate: false, schemas: ['mysql'] },
      data: true,
    },
    {
      scenario: "the nil UUID, but the cloud's databases (a position lost in a crash)",
      report: { volume: true, grastate: { uuid: NIL_UUID, seqno: -1 }, gvwstate: true, schemas: ['keystone', 'mysql'] },
      data: true,
    },
    {
      scenario: "InnoDB's own directories do not count",
      report: { volume: true, gvwstate: false, schemas: ['#innodb_temp', 'mysql'] },
      data: false,
    },
  ];
  for (const s of scenarios)
    it(`${s.scenario}: ${s.data ? 'holds data' : 'holds none'}`, () => expect(holdsData(s.report)).toBe(s.data));
});
