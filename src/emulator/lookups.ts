/**
 * The small reference tables every instance has: statuses, workflow states, configurations,
 * templates, milestone types, field values, tags, issues. Names are fixed; only issues scale.
 */
import type { Issue, Named, Status } from './model.js';

/** Statuses 1–6 as the spec lists them, plus three custom ones (ids 7–9). */
export const STATUSES: readonly Status[] = [
  { id: 1, name: 'Untested', color: '#9e9e9e', is_success: false, is_failure: false },
  { id: 2, name: 'Passed', color: '#4caf50', is_success: true, is_failure: false },
  { id: 3, name: 'Failed', color: '#f44336', is_success: false, is_failure: true },
  { id: 4, name: 'Retest', color: '#ff9800', is_success: false, is_failure: false },
  { id: 5, name: 'Blocked', color: '#795548', is_success: false, is_failure: true },
  { id: 6, name: 'Skipped', color: '#607d8b', is_success: false, is_failure: false },
  { id: 7, name: 'Passed with notes', color: '#8bc34a', is_success: true, is_failure: false },
  { id: 8, name: 'Known issue', color: '#e91e63', is_success: false, is_failure: true },
  { id: 9, name: 'In progress', color: '#2196f3', is_success: false, is_failure: false },
];
/** Relative frequency of each result status id (index = id - 1); nobody records "Untested". */
export const RESULT_STATUS_WEIGHTS = [0, 60, 14, 5, 5, 5, 5, 3, 3];

const named = (names: readonly string[]): Named[] => names.map((name, i) => ({ id: i + 1, name }));

export const STATES = named(['New', 'In progress', 'Under review', 'Done', 'Rejected']);
export const CONFIGS = named([
  'Chrome / Linux',
  'Chrome / Windows',
  'Firefox / Linux',
  'Firefox / Windows',
  'Safari / macOS',
  'Edge / Windows',
  'iOS 18 / iPhone',
  'Android 15 / Pixel',
]);
export const TEMPLATES = named(['Exploratory', 'Regression charter', 'Smoke charter', 'Accessibility review']);
export const MILESTONE_TYPES = named(['Release', 'Sprint', 'Iteration', 'Hotfix']);
export const FIELD_VALUES = named([
  'Priority: High',
  'Priority: Medium',
  'Priority: Low',
  'Area: Checkout',
  'Area: Search',
  'Area: Accounts',
  'Platform: Web',
  'Platform: Mobile',
]);
export const TAGS = ['api', 'flaky', 'mobile', 'nightly', 'performance', 'regression', 'release', 'security', 'smoke', 'ui'];
export const AUTOMATION_TAGS = ['ci', 'e2e', 'integration', 'unit', 'visual'];
export const ROLE_NAMES = ['Guest', 'Tester', 'Lead', 'Designer', 'Manager', 'Project admin', 'Reviewer', 'Reporter'];
export const NOTES = [
  '<p>Works as expected.</p>',
  '<p>Verified on staging.</p>',
  '<p>Step 3 fails: <strong>500</strong> from the checkout service.</p>',
  '<p>Could not reach the login page; environment down.</p>',
  '<p>Retested after fix, OK.</p>',
  '<p>Screenshot attached.</p>',
  '<p>Slow response (&gt; 3 s) but functional.</p>',
  '<p>Skipped: feature flag off.</p>',
  '',
  '<p>Flaky: passed on second attempt.</p>',
];

export function makeIssues(count: number): Issue[] {
  return Array.from({ length: count }, (_, i) => ({
    id: i + 1,
    name: `TM-${1000 + i + 1}`,
    url: `https://issues.example.test/browse/TM-${1000 + i + 1}`,
  }));
}

export const FIRST_NAMES = [
  'Ada',
  'Ben',
  'Chloe',
  'Dmitri',
  'Elena',
  'Farah',
  'Goran',
  'Hana',
  'Ivo',
  'Jun',
  'Kemal',
  'Lena',
  'Mateo',
  'Nora',
  'Omar',
  'Priya',
  'Quentin',
  'Rosa',
  'Sven',
  'Tariq',
  'Uma',
  'Viktor',
  'Wen',
  'Yara',
];
export const LAST_NAMES = [
  'Lovelace',
  'Okafor',
  'Martin',
  'Ivanov',
  'Rossi',
  'Haddad',
  'Novak',
  'Sato',
  'Horvat',
  'Chen',
  'Yilmaz',
  'Berg',
  'Garcia',
  'Lind',
  'Farouk',
  'Nair',
  'Dubois',
  'Silva',
  'Olsen',
  'Aziz',
];
export const PROJECT_NAMES = [
  'Checkout',
  'Mobile app',
  'Search',
  'Accounts',
  'Payments',
  'Reporting',
  'Onboarding',
  'Admin console',
  'Notifications',
  'Inventory',
  'Shipping',
  'Catalogue',
];
