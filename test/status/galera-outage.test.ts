/** `stackctl status` when Galera is down: the cluster-wide finding and each member's disk and log. */
import { describe, expect, it } from 'vitest';
import { describeGaleraMember, outageFinding } from '../../src/status/galera.js';
import type { GaleraMember } from '../../src/status/model.js';

const UUID = 'a9fd4cf2-e8e3-11f1-a695-defe4cd7f62f';
const waiting: GaleraMember = {
  node: 'ctl-1',
  error: "mariadb exited with 1: ERROR 2002 (HY000): Can't connect to server on 10.0.0.11",
  diagnosis: {
    running: 'running, server not answering',
    uuid: UUID,
    seqno: -1,
    safeToBootstrap: false,
    position: '17 (start log)',
    gvwstate: true,
    data: true,
    log: [
      `galera: starting from position ${UUID}:17 (InnoDB, after a crash)`,
      `galera: joining cluster ${UUID} through 10.0.0.10 10.0.0.12`,
    ],
  },
};

describe('Galera outage in stackctl status', () => {
  it('no member of several in a primary component: one cloud finding naming the recover dry run', () => {
    const f = outageFinding(3, [waiting, { ...waiting, node: 'ctl-2' }, { node: 'ctl-0', error: 'node unreachable' }]);
    expect(f).toEqual({
      severity: 'unhealthy',
      node: 'cloud',
      subject: 'galera',
      message:
        "no member runs a primary component (ctl-1, ctl-2 waiting): 'stackctl recover galera --dry-run' shows each member's position and the one to restart the cluster from",
    });
  });

  it('none while a member is Primary, nor for a single server', () => {
    expect(
      outageFinding(3, [{ node: 'ctl-0', clusterStatus: 'Primary', localState: 'Synced', clusterSize: 2 }, waiting]),
    ).toBeUndefined();
    expect(outageFinding(1, [waiting])).toBeUndefined();
  });

  it("a member's line carries its disk, position and last log lines", () => {
    expect(describeGaleraMember(waiting)).toBe(
      `ctl-1: mariadb exited with 1: ERROR 2002 (HY000): Can't connect to server on 10.0.0.11\n` +
        `    running, server not answering; grastate uuid ${UUID}, seqno -1, safe_to_bootstrap 0, gvwstate.dat, position 17 (start log)\n` +
        `    | galera: starting from position ${UUID}:17 (InnoDB, after a crash)\n` +
        `    | galera: joining cluster ${UUID} through 10.0.0.10 10.0.0.12`,
    );
  });
});
