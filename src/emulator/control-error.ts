/**
 * The control plane's rejections, in the API's error shape with one entry naming the field:
 * ControlError for the semantic checks in code (404 missing, 409 impossible), and
 * schemaErrorBody for the bodies fastify's route schemas reject (always 400).
 */
import type { FastifySchemaValidationError } from 'fastify';
import { makeErrorBody, type ErrorBody } from '../api/errors.js';

export class ControlError extends Error {
  /** `field` is a list when the fault is a combination of fields (two forms mixed, say). */
  constructor(
    readonly status: number,
    readonly field: string | readonly string[],
    message: string,
  ) {
    super(message);
  }

  toBody(): ErrorBody {
    const fields = typeof this.field === 'string' ? [this.field] : this.field;
    return makeErrorBody(this.message, Object.fromEntries(fields.map((f) => [f, [this.message]])));
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
    e.keyword === 'required'
      ? `The ${field} is required.`
      : e.keyword === 'additionalProperties'
        ? `Unknown field ${field}.`
        : e.keyword === 'enum'
          ? `The ${field} must be one of ${(p.allowedValues as unknown[]).join(', ')}.`
          : `The ${field} ${e.message ?? 'is invalid'}.`;
  return new ControlError(400, field, message).toBody();
}
