/**
 * kf-jupyter JupyterLab extension: the "Kubeflow Trainer" sidebar, job
 * panels, and commands to insert training cell templates.
 */
import {
  ILabShell,
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, MainAreaWidget, ToolbarButton, WidgetTracker } from '@jupyterlab/apputils';
import { DocumentRegistry } from '@jupyterlab/docregistry';
import { INotebookModel, INotebookTracker, NotebookActions, NotebookPanel } from '@jupyterlab/notebook';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { refreshIcon } from '@jupyterlab/ui-components';
import { DisposableDelegate, IDisposable } from '@lumino/disposable';
import { Menu } from '@lumino/widgets';

import { ITarget } from './api';
import { trainerIcon } from './icon';
import { createCompareWidget } from './compare';
import { createJobWidget, JobPanel, jobWidgetId } from './jobpanel';
import { liveMonitorFactory } from './livemonitor';
import { TrainerSidebar } from './sidebar';
import { liveSweepFactory } from './sweep';
import { CELL_TEMPLATES, ICellTemplate } from './templates';

export const PLUGIN_ID = 'kf-jupyter-labextension:plugin';

export namespace CommandIDs {
  export const refresh = 'kf-jupyter:refresh';
  export const openSidebar = 'kf-jupyter:open-sidebar';
  export const openJob = 'kf-jupyter:open-job';
  export const compareJobs = 'kf-jupyter:compare-jobs';
  export const insertPrefix = 'kf-jupyter:insert-';
}

export const CATEGORY = 'Kubeflow Trainer';

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'Kubeflow Trainer sidebar, job logs and training cell templates.',
  autoStart: true,
  optional: [ICommandPalette, INotebookTracker, ILayoutRestorer, ILabShell, IRenderMimeRegistry],
  activate: (
    app: JupyterFrontEnd,
    palette: ICommandPalette | null,
    notebooks: INotebookTracker | null,
    restorer: ILayoutRestorer | null,
    labShell: ILabShell | null,
    rendermime: IRenderMimeRegistry | null
  ) => {
    const { commands, shell } = app;
    // Jupyter Notebook 7 has no ILabShell, and its shell keeps one widget in 'main' (the
    // notebook): a job panel added there was silently dropped. There it opens in the right
    // side panel, which Notebook 7 shows.
    const jobArea = labShell ? 'main' : 'right';
    const reveal = (id: string): void => {
      const nb = shell as unknown as { expandRight?: (id?: string) => void };
      if (!labShell && typeof nb.expandRight === 'function') {
        nb.expandRight(id);
      } else {
        shell.activateById(id);
      }
    };

    // The live job monitor in cell outputs (works while the kernel is busy).
    if (rendermime) {
      rendermime.addFactory(
        liveMonitorFactory((target, name) => {
          void commands.execute(CommandIDs.openJob, { name, backend: target.backend, namespace: target.namespace ?? '' });
        }),
        -20
      );
      rendermime.addFactory(liveSweepFactory(), -20);
    }

    const sidebar = new TrainerSidebar();
    shell.add(sidebar, 'left', { rank: 900 });
    if (restorer) {
      restorer.add(sidebar, sidebar.id);
    }

    const jobs = new WidgetTracker<MainAreaWidget<JobPanel>>({ namespace: 'kf-jupyter-job' });
    if (restorer) {
      void restorer.restore(jobs, {
        command: CommandIDs.openJob,
        args: w => ({
          name: w.content.jobName,
          backend: w.content.target.backend,
          namespace: w.content.target.namespace ?? ''
        }),
        name: w => w.id
      });
    }

    commands.addCommand(CommandIDs.openJob, {
      label: args => (args.name ? `Open Job ${args.name}` : 'Open Kubeflow Trainer Job'),
      icon: trainerIcon,
      execute: args => {
        const name = String(args.name ?? '');
        if (!name) {
          return;
        }
        const target: ITarget = {
          backend: String(args.backend || sidebar.target.backend || 'local'),
          namespace: args.namespace ? String(args.namespace) : null
        };
        const id = jobWidgetId(target, name);
        const existing = jobs.find(w => w.id === id);
        if (existing) {
          reveal(existing.id);
          return existing;
        }
        const widget = createJobWidget(target, name);
        void jobs.add(widget);
        shell.add(widget, jobArea, { rank: 900 });
        reveal(widget.id);
        return widget;
      }
    });
    sidebar.openRequested.connect((_, args) => {
      void commands.execute(CommandIDs.openJob, {
        name: args.name,
        backend: args.backend,
        namespace: args.namespace ?? ''
      });
    });

    commands.addCommand(CommandIDs.compareJobs, {
      label: 'Compare Kubeflow Trainer Jobs',
      caption: 'Overlay the metric curves of several jobs',
      icon: trainerIcon,
      execute: args => {
        const names = Array.isArray(args.names) ? args.names.map(String) : [];
        if (names.length === 0) {
          return;
        }
        const target: ITarget = {
          backend: String(args.backend || sidebar.target.backend || 'local'),
          namespace: args.namespace ? String(args.namespace) : null
        };
        const widget = createCompareWidget(target, names);
        shell.add(widget, jobArea, { rank: 900 });
        reveal(widget.id);
        return widget;
      }
    });
    sidebar.compareRequested.connect((_, args) => {
      void commands.execute(CommandIDs.compareJobs, {
        names: args.names,
        backend: args.backend,
        namespace: args.namespace ?? ''
      });
    });

    commands.addCommand(CommandIDs.refresh, {
      label: 'Refresh Kubeflow Trainer',
      caption: 'Reload backends, runtimes and jobs (and the status of the open job panels)',
      icon: refreshIcon,
      execute: async () => {
        await Promise.all([sidebar.refresh(), ...jobs.filter(() => true).map(w => w.content.refresh())]);
      }
    });

    commands.addCommand(CommandIDs.openSidebar, {
      label: 'Show Kubeflow Trainer Panel',
      icon: trainerIcon,
      execute: () => shell.activateById(sidebar.id)
    });

    const isNotebook = (): boolean => !!notebooks?.currentWidget && notebooks.currentWidget === shell.currentWidget;
    for (const t of CELL_TEMPLATES) {
      commands.addCommand(CommandIDs.insertPrefix + t.magic, {
        label: t.label,
        caption: `Insert a ${t.framework} training cell (%%${t.magic}) below the active cell`,
        icon: trainerIcon,
        isEnabled: () => isNotebook() || !!notebooks?.currentWidget,
        execute: () => {
          const panel = notebooks?.currentWidget;
          if (panel) {
            insertTemplate(panel, t);
          }
        }
      });
    }

    if (palette) {
      const cmds = [
        CommandIDs.openSidebar,
        CommandIDs.refresh,
        ...CELL_TEMPLATES.map(t => CommandIDs.insertPrefix + t.magic)
      ];
      for (const command of cmds) {
        palette.addItem({ command, category: CATEGORY });
      }
    }

    // Notebook toolbar: one button opening a menu of the templates.
    const menu = new Menu({ commands });
    menu.title.label = 'Kubeflow Trainer';
    for (const t of CELL_TEMPLATES) {
      menu.addItem({ command: CommandIDs.insertPrefix + t.magic });
    }
    menu.addItem({ type: 'separator' });
    menu.addItem({ command: CommandIDs.refresh });
    menu.addItem({ command: CommandIDs.openSidebar });
    app.docRegistry.addWidgetExtension('Notebook', new ToolbarExtension(menu));
  }
};

/** Insert a template below the active cell (or into it, when it is empty). */
export function insertTemplate(panel: NotebookPanel, t: ICellTemplate): void {
  const notebook = panel.content;
  const active = notebook.activeCell;
  if (!active || active.model.type !== 'code' || active.model.sharedModel.getSource().trim() !== '') {
    NotebookActions.insertBelow(notebook);
  }
  const cell = notebook.activeCell;
  if (cell) {
    if (cell.model.type !== 'code') {
      NotebookActions.changeCellType(notebook, 'code');
    }
    notebook.activeCell?.model.sharedModel.setSource(t.source);
    notebook.mode = 'edit';
  }
}

class ToolbarExtension implements DocumentRegistry.IWidgetExtension<NotebookPanel, INotebookModel> {
  constructor(private readonly _menu: Menu) {}

  createNew(panel: NotebookPanel): IDisposable {
    const button = new ToolbarButton({
      icon: trainerIcon,
      label: 'Trainer',
      tooltip: 'Kubeflow Trainer: insert a training cell',
      onClick: () => {
        const rect = button.node.getBoundingClientRect();
        this._menu.open(rect.left, rect.bottom);
      }
    });
    button.addClass('kf-toolbar-button');
    panel.toolbar.insertAfter('cellType', 'kf-jupyter', button) || panel.toolbar.addItem('kf-jupyter', button);
    return new DisposableDelegate(() => button.dispose());
  }
}

export default plugin;
