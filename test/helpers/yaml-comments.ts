/** Lines of a YAML text declaring a key that neither have a trailing comment nor follow a comment line. */
export function keysWithoutComment(text: string): string[] {
  const lines = text.split('\n');
  const missing: string[] = [];
  lines.forEach((line, i) => {
    if (!/^\s*[A-Za-z_][\w-]*:/.test(line) || /\s#\s/.test(line)) return;
    const previous = lines
      .slice(0, i)
      .reverse()
      .find((l) => l.trim() !== '');
    if (previous === undefined || !previous.trim().startsWith('#')) missing.push(`line ${i + 1}: ${line.trim()}`);
  });
  return missing;
}
