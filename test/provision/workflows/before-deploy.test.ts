/**
 * Which nodes `stackctl deploy` provisions before the services and what each
 * still needs, by state (the table walked row by row), the nodes it never
 * touches (active, preprovisioned) and the states it refuses.
 */
import { describe, expect, it } from 'vitest';
import { nodesToProvision } from '../../../src/provision/workflows/before-deploy.js';
import { ALL_STATES, NodeState } from '../../../src/provision/states.js';

const inventory = { nodes: [{ name: 'a' }, { name: 'b', preprovisioned: true }] } as Parameters<
  typeof nodesToProvision
>[0];

describe('nodes deploy provisions first', () => {
  it.each([
    { state: NodeState.ENROLL, phases: ['enroll', 'inspect', 'provision'] },
    { state: NodeState.MANAGEABLE, phases: ['inspect', 'provision'] },
    { state: NodeState.INSPECT_FAILED, phases: ['inspect', 'provision'] },
    { state: NodeState.CLEAN_FAILED, phases: ['provision'] },
    { state: NodeState.AVAILABLE, phases: ['provision'] },
    { state: NodeState.DEPLOY_FAILED, phases: ['provision'] },
    { state: NodeState.ERROR, phases: ['provision'] },
  ])('from $state: $phases', ({ state, phases }) => {
    expect(
      nodesToProvision(
        inventory,
        () => state,
        () => false,
        false,
      ),
    ).toEqual([{ node: 'a', state, phases }]);
  });

  it('skips the inspection of a manageable node that was inspected already', () => {
    expect(
      nodesToProvision(
        inventory,
        () => NodeState.MANAGEABLE,
        () => true,
        false,
      )[0]!.phases,
    ).toEqual(['provision']);
  });

  it('leaves active and preprovisioned nodes alone, whatever the state file says of the latter', () => {
    expect(
      nodesToProvision(
        inventory,
        () => NodeState.ACTIVE,
        () => false,
        false,
      ),
    ).toEqual([]);
    const seen: string[] = [];
    nodesToProvision(
      inventory,
      (n) => {
        seen.push(n);
        return NodeState.ENROLL;
      },
      () => false,
      false,
    );
    expect(seen).toEqual(['a']);
  });

  it.each([
    NodeState.VERIFYING,
    NodeState.INSPECTING,
    NodeState.INSPECT_WAIT,
    NodeState.CLEANING,
    NodeState.CLEAN_WAIT,
    NodeState.DEPLOYING,
    NodeState.DEPLOY_WAIT,
  ])('takes a node in %s up again only with --resume', (state) => {
    expect(() =>
      nodesToProvision(
        inventory,
        () => state,
        () => false,
        false,
      ),
    ).toThrow(expect.objectContaining({ code: 'E_NODE_STATE', hint: expect.stringContaining('--resume') }));
    expect(
      nodesToProvision(
        inventory,
        () => state,
        () => false,
        true,
      ),
    ).toHaveLength(1);
  });

  it('refuses a node being undeployed, even with --resume: that operation is finished by nodes undeploy', () => {
    expect(() =>
      nodesToProvision(
        inventory,
        () => NodeState.UNDEPLOYING,
        () => false,
        true,
      ),
    ).toThrow(expect.objectContaining({ code: 'E_NODE_STATE', hint: expect.stringContaining('nodes undeploy') }));
  });

  it('has a decision for every state', () => {
    for (const state of ALL_STATES) {
      let decided = true;
      try {
        nodesToProvision(
          inventory,
          () => state,
          () => false,
          true,
        );
      } catch {
        decided = state === NodeState.UNDEPLOYING;
      }
      expect(decided, state).toBe(true);
    }
  });
});
