/**
 * The control plane's rejections, in the API's error shape with one entry naming the field:
 * ControlError for the semantic checks in code (404 missing, 409 impossible), and
 * schemaErrorBody for the bodies fastify's route schemas reject (always 400).
 */
import type { FastifySchemaValidationError } from 'fastify';
import { makeErrorBody, type ErrorBody } from '../api/errors.js';

export class ControlError extends Error {
  constructor(readonly status: number, readonly field: string, message: string) {
    super(message);
  }

  toBody(): ErrorBody {
    return makeErrorBody(this.message, { [this.field]: [this.message] });
  }
}

/**
 * One ajv error (fastify stops at the first) as a body naming the field and the rule it broke.
 * The field is the property itself, not its path (`after_n`, not `rate_limit/after_n`); a body
 * that is not an object at all is named `body`.
 */
export function schemaErrorBody(e: FastifySchemaValidationError): ErrorBody {
  const p = e.params;
  const field = String(p.missingProperty ?? p.additionalProperty ?? (e.instancePath.split('/').pop() || 'body'));
  const message =
    e.keyword === 'required' ? `The ${field} is required.`
    : e.keyword === 'additionalProperties' ? `Unknown field ${field}.`
    : e.keyword === 'enum' ? `The ${field} must be one of ${(p.allowedValues as unknown[]).join(', ')}.`
    : `The ${field} ${e.message ?? 'is invalid'}.`;
  return new ControlError(400, field, message).toBody();
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
