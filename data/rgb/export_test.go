package rgb


// HaveTurbo reports whether the libjpeg-turbo path is compiled in (tests only).
const HaveTurbo = haveTurbo

