"""The datasets `python -m data_prep DATASET` converts, by name."""

from data_prep import aime, apps, codecontests, livecodebench, olympiadbench, polaris

SOURCES = {
    source.name: source
    for source in (
        codecontests.SOURCE,
        apps.SOURCE,
        livecodebench.SOURCE,
        aime.AIME24,
        aime.AIME25,
        olympiadbench.SOURCE,
        polaris.SOURCE,
    )
}
