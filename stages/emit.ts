import { placeholderStage } from './placeholder.ts';

export const stage = placeholderStage('emit', 'Assemble the self-contained submission directory dist/<profile>/', 'issue 3');
