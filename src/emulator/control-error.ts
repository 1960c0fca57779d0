import { makeErrorBody, type ErrorBody } from '../api/errors.js';

/** A rejected control-plane request: the status and a body naming the offending field. */
export class ControlError extends Error {
  constructor(readonly status: number, readonly field: string, message: string) {
    super(message);
  }

  toBody(): ErrorBody {
    return makeErrorBody(this.message, { [this.field]: [this.message] });
  }
}

type Body = Record<string, unknown>;

export function asObject(body: unknown, field = 'body'): Body {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new ControlError(400, field, `The ${field} must be a JSON object.`);
  }
  return body as Body;
}

export function intField(body: Body, field: string, opts: { min?: number; max?: number; optional?: boolean } = {}): number | undefined {
  const v = body[field];
  if (v === undefined && opts.optional) return undefined;
  const min = opts.min ?? 0;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min || (opts.max !== undefined && v > opts.max)) {
    const range = opts.max === undefined ? `>= ${min}` : `between ${min} and ${opts.max}`;
    throw new ControlError(400, field, `The ${field} must be an integer ${range}.`);
  }
  return v;
}

export function requireInt(body: Body, field: string, min = 1, max?: number): number {
  return intField(body, field, max === undefined ? { min } : { min, max })!;
}

export function stringField(body: Body, field: string): string {
  const v = body[field];
  if (typeof v !== 'string' || v.trim() === '') throw new ControlError(400, field, `The ${field} must be a non-empty string.`);
  return v;
}
