import { describe, expect, it } from 'vitest';
import { keepsTickObject, keepTickObjectShape } from '../src/tick-shape.js';

describe('keepTickObjectShape', () => {
  // Fails if a Node release renames the resource type or stops reporting ticks to async hooks:
  // then nothing is kept, and replicas pay V8's runtime for every tick object again (tick-shape.ts).
  it('catches a tick object on this Node: its async resource type is still "TickObject"', () => {
    expect(keepsTickObject()).toBe(false);
    keepTickObjectShape();
    expect(keepsTickObject()).toBe(true);
    keepTickObjectShape();
    expect(keepsTickObject()).toBe(true);
  });
});
