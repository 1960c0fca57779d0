/**
 * The one error an invalid configuration raises: the CLI prints its message and exits 2. Its own
 * module so that the CLI can report it without loading the whole config machinery.
 */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';
  /** Each problem found, one sentence each; `message` joins them. */
  readonly problems: readonly string[];

  constructor(message: string, problems: readonly string[] = [message], options?: ErrorOptions) {
    super(message, options);
    this.problems = problems;
  }

  static fromProblems(problems: readonly string[]): ConfigError {
    const message =
      problems.length === 1
        ? `invalid configuration: ${problems[0]}`
        : `invalid configuration (${problems.length} problems):\n${problems.map((p) => `  - ${p}`).join('\n')}`;
    return new ConfigError(message, problems);
  }
}
