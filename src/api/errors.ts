/**
 * Error bodies of the Read API: `{"message": "...", "errors": {"<param>": ["..."]}}`, the form the
 * real product uses. The emulator answers with them, and so does the proxy when it rejects a
 * request locally.
 */
export interface ErrorBody {
  readonly message: string;
  readonly errors: Readonly<Record<string, readonly string[]>>;
}

export function makeErrorBody(message: string, errors: Record<string, string[]> = {}): ErrorBody {
  return { message, errors };
}

/** One problem with one parameter. 400: the value is malformed; 422: well-formed but against a rule. */
export interface ParamProblem {
  readonly param: string;
  readonly status: 400 | 422;
  readonly rule: string;
}

/** A request that cannot be answered because of its parameters; carries every problem found. */
export class ValidationError extends Error {
  readonly status: 400 | 422;
  readonly problems: readonly ParamProblem[];

  constructor(problems: readonly ParamProblem[]) {
    const malformed = problems.some((p) => p.status === 400);
    super(malformed ? 'The request is malformed.' : 'The given data was invalid.');
    this.name = 'ValidationError';
    // A malformed value (400) takes precedence over a rule violation (422).
    this.status = malformed ? 400 : 422;
    this.problems = problems;
  }

  toBody(): ErrorBody {
    const errors: Record<string, string[]> = {};
    for (const p of this.problems) (errors[p.param] ??= []).push(p.rule);
    return makeErrorBody(this.message, errors);
  }
}
